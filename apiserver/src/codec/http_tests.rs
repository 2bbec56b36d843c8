//! Protobuf through the server: what a client sending and accepting
//! `application/vnd.kubernetes.protobuf` sees.

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use prost::Message as _;
use serde_json::json;

use super::*;

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", accept)
        .body(kube::client::Body::from(body))
        .unwrap();
    let res = client.send(req).await.expect("a response");
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, ct, body)
}

const PB_FIRST: &str = "application/vnd.kubernetes.protobuf, */*";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_created_in_protobuf_is_served_in_both_encodings() {
    let (_data, _server, client) = crate::test_server().await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "pb", "labels": {"a": "b"}}, "data": {"k": "v"}});
    let body = encode_object(&cm).unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let (status, ct, body) = send(&client, "POST", path, PROTOBUF, PB_FIRST, body).await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(ct, PROTOBUF);
    let created = decode_object(&body).unwrap();
    assert_eq!(created["data"], json!({"k": "v"}));
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(created["metadata"]["creationTimestamp"].is_string());
    // JSON clients see the same object.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let got = api.get("pb").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    assert_eq!(
        got.metadata.uid.as_deref(),
        created["metadata"]["uid"].as_str()
    );
    // Lists and Status errors in protobuf.
    let (status, ct, body) = send(&client, "GET", path, "", PB_FIRST, vec![]).await;
    assert_eq!((status, ct.as_str()), (200, PROTOBUF));
    let list = decode_object(&body).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"][0]["metadata"]["name"], "pb");
    let (status, ct, body) = send(
        &client,
        "GET",
        &format!("{path}/nope"),
        "",
        PB_FIRST,
        vec![],
    )
    .await;
    assert_eq!((status, ct.as_str()), (404, PROTOBUF));
    let st = decode_object(&body).unwrap();
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("NotFound"))
    );
    // A client preferring JSON still gets JSON.
    let accept = "application/json, application/vnd.kubernetes.protobuf";
    let (_, ct, body) = send(&client, "GET", &format!("{path}/pb"), "", accept, vec![]).await;
    assert_eq!(ct, "application/json");
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["data"]["k"],
        "v"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_protobuf_body_is_a_400_naming_the_problem() {
    let (_data, _server, client) = crate::test_server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    for (body, want) in [
        (b"{}".to_vec(), "prefix"),
        (b"k8s\0\x0a\x07\x0a\x02v1\x12\x01".to_vec(), "malformed"),
        (
            b"k8s\0\x0a\x10\x0a\x02v1\x12\x0aNoSuchKind".to_vec(),
            "NoSuchKind",
        ),
    ] {
        let (status, _, out) = send(&client, "POST", path, PROTOBUF, "", body).await;
        let text = String::from_utf8_lossy(&out);
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(want), "{text}");
    }
    // The server still serves.
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.list(&Default::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_stay_json_only() {
    let (_data, _server, client) = crate::test_server().await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}});
    let bytes = serde_json::to_vec(&widget).unwrap();
    let (status, _, _) = send(&client, "POST", path, PROTOBUF, "", bytes.clone()).await;
    assert_eq!(status, 415);
    let (status, _, _) = send(&client, "GET", path, "", PROTOBUF, vec![]).await;
    assert_eq!(status, 406);
    let (status, ct, _) = send(&client, "POST", path, "application/json", PB_FIRST, bytes).await;
    assert_eq!((status, ct.as_str()), (201, "application/json"));
    // OpenAPI advertises protobuf for built-in kinds only.
    let doc = |path: &'static str| {
        let client = client.clone();
        async move {
            let (_, _, body) = send(&client, "GET", path, "", "application/json", vec![]).await;
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    };
    let core = doc("/openapi/v3/api/v1").await;
    let post = &core["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["post"];
    assert!(
        post["requestBody"]["content"][PROTOBUF].is_object(),
        "{post}"
    );
    assert!(
        post["responses"]["200"]["content"][PROTOBUF].is_object(),
        "{post}"
    );
    let custom = doc("/openapi/v3/apis/example.com/v1").await;
    let post = &custom["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"]["post"];
    assert!(
        post["requestBody"]["content"]["application/json"].is_object(),
        "{post}"
    );
    assert!(
        post["requestBody"]["content"].get(PROTOBUF).is_none(),
        "{post}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_watch_streams_length_prefixed_watch_events() {
    let (_data, _server, client) = crate::test_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true")
        .header("accept", PB_FIRST)
        .body(kube::client::Body::empty())
        .unwrap();
    let res = client.send(req).await.unwrap();
    assert_eq!(res.headers()["content-type"], PROTOBUF_WATCH);
    let mut body = res.into_body();
    let mut buf = Vec::new();
    // Read until one whole frame is in (the stream stays open).
    let frame = loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() >= 4 + len {
                break buf[4..4 + len].to_vec();
            }
        }
        let chunk = body.frame().await.expect("the stream goes on").unwrap();
        if let Ok(data) = chunk.into_data() {
            buf.extend_from_slice(&data);
        }
    };
    let event = WatchEvent::decode(frame.as_slice()).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let object = decode_object(&event.object.unwrap().raw.unwrap()).unwrap();
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["metadata"]["name"], "w");
}
