//! The `http` import: outbound requests to the hosts the manifest allows,
//! within the call's deadline.

use crate::plugin::bindings::reconciler::wasmlet::plugin::http;
use crate::plugin::metrics::PluginMetrics;
use crate::plugin::sandbox::State;

impl State {
    /// The live `http.fetch`.
    pub(super) async fn fetch_live(
        &mut self,
        req: http::Request,
    ) -> Result<http::Response, http::HttpError> {
        let url = crate::plugin::http::parse_url(&req.url)?;
        let host = url.host_str().unwrap_or("").to_string();
        if !self
            .plugin
            .manifest
            .allows_http_host(&host, url.port_or_known_default())
        {
            PluginMetrics::inc(&self.plugin.metrics.denied);
            tracing::warn!(plugin = %self.plugin.name, key = %self.key, %host, "plugin HTTP request denied by its manifest");
            return Err(http::HttpError::Denied(format!(
                "{host} is not in the http-hosts of plugin {}",
                self.plugin.name
            )));
        }
        let Some(client) = self.plugin.http.clone() else {
            return Err(http::HttpError::Other(
                "outbound HTTP is not available on this host".into(),
            ));
        };
        // Never wait past the call's deadline (it runs from the start of the call).
        let budget = self.remaining();
        // Logged without the query, which may carry credentials.
        let (method, path, started) = (
            req.method.clone(),
            url.path().to_string(),
            std::time::Instant::now(),
        );
        let allow_private = self.plugin.manifest.permissions.http_private_addresses;
        let result = client.fetch(req, &url, budget, allow_private).await;
        let ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(r) => {
                tracing::debug!(plugin = %self.plugin.name, key = %self.key, %method, %host, %path, status = r.status, ms, "plugin HTTP request")
            }
            Err(e) => {
                tracing::debug!(plugin = %self.plugin.name, key = %self.key, %method, %host, %path, error = ?e, ms, "plugin HTTP request failed")
            }
        }
        result
    }
}
