//! The fuzz targets, one module per area.

pub mod apply;
#[cfg(feature = "host")]
pub mod component;
#[cfg(feature = "host")]
pub mod manifest;
pub mod patch;
pub mod patch_bounds;
pub mod rbac;
#[cfg(feature = "host")]
pub mod rest;
pub mod schema;
pub mod selector;
pub mod selector_bounds;
