//! Harness for the end-to-end tests: start the real binary, connect real clients.
