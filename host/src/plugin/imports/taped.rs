//! The contract's imports as the guest calls them: each goes through the
//! call's tape ([`crate::plugin::record::Tape`]) when there is one. Replaying,
//! the record answers and the live import never runs; recording, the live
//! import runs and its request and answer are taped. Without a tape this is
//! the live import and nothing else.

use serde_json::{Value, json};

use crate::plugin::bindings::reconciler::wasmlet::plugin::client::{
    self, ClientError, DeleteOptions, Event, ObjectRef, PatchType, TypeRef,
};
use crate::plugin::bindings::reconciler::wasmlet::plugin::{clusters, http, log};
use crate::plugin::sandbox::State;
use crate::plugin::tape::{json_string_answer, json_string_result, result_answer, result_json};

use super::{At, MAX_CREATE_ALL};

/// What a replayed import answers when the record has nothing for it.
trait Unanswered {
    fn unanswered(message: String) -> Self;
}

impl<T> Unanswered for Result<T, ClientError> {
    fn unanswered(message: String) -> Self {
        Err(ClientError::Unavailable(message))
    }
}

impl<T> Unanswered for Result<T, http::HttpError> {
    fn unanswered(message: String) -> Self {
        Err(http::HttpError::Other(message))
    }
}

impl State {
    /// The request as the record holds it, when the call is taped.
    fn tape_args(&self, args: impl FnOnce() -> Value) -> Option<Value> {
        let tape = self.tape.as_ref()?;
        (tape.recording() || tape.replaying()).then(args)
    }

    /// Replaying: the record's answer to `op(args)`, or an error saying it has none.
    fn replayed<T: Unanswered>(
        &self,
        op: &str,
        args: &Option<Value>,
        decode: impl FnOnce(Value) -> Option<T>,
    ) -> Option<T> {
        let (tape, args) = (self.tape.as_ref()?, args.as_ref()?);
        if !tape.replaying() {
            return None;
        }
        // A shadow candidate reads the cluster live where the live version
        // did not read; everything else it asks for is held back.
        let live_read = tape.shadowing()
            && matches!(
                op.split_once('.'),
                Some(("client" | "clusters", "get" | "list" | "list-changes"))
            );
        match tape.answer(op, args.clone(), live_read).and_then(decode) {
            Some(answer) => Some(answer),
            None if live_read => None,
            None if tape.shadowing() => Some(T::unanswered(format!(
                "shadow: held back, the live version made no such request: {op} {args}"
            ))),
            None => Some(T::unanswered(format!(
                "replay: the record has no answer for {op} {args}"
            ))),
        }
    }

    /// Recording: tapes `op(args)` with its result.
    fn taped(&self, op: &str, args: Option<Value>, result: impl FnOnce() -> Value) {
        if let (Some(tape), Some(args)) = (&self.tape, args)
            && tape.recording()
        {
            tape.record(op, args, result());
        }
    }
}

/// A JSON string argument as a JSON value (kept as text when it is not JSON).
fn value_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

fn list_result(r: &Result<Vec<String>, ClientError>) -> Value {
    match r {
        Ok(items) => json!({ "ok": items.iter().map(|i| value_of(i)).collect::<Vec<_>>() }),
        Err(e) => json!({ "err": e }),
    }
}

fn list_answer(v: Value) -> Option<Result<Vec<String>, ClientError>> {
    let Value::Object(mut m) = v else { return None };
    if let Some(Value::Array(items)) = m.remove("ok") {
        return Some(Ok(items.iter().map(Value::to_string).collect()));
    }
    serde_json::from_value(m.remove("err")?).ok().map(Err)
}

/// Runs `op` through the tape: `$live` is the live import, evaluated only
/// when the record does not answer (and, replaying, only for a shadow's reads).
/// With `at`, `$op` is a function both cluster interfaces have: taped as
/// `client.OP`, or as `clusters.OP` with `"cluster": NAME` first in the args.
macro_rules! through_tape {
    ($self:ident, at $at:expr, $op:literal, $args:expr, $encode:expr, $decode:expr, $live:expr) => {{
        let at: At<'_> = $at;
        let op = match at {
            At::Own => concat!("client.", $op),
            At::Named(_) => concat!("clusters.", $op),
        };
        through_tape!($self, op, at.tape_args($args), $encode, $decode, $live)
    }};
    ($self:ident, $op:expr, $args:expr, $encode:expr, $decode:expr, $live:expr) => {{
        let args = $self.tape_args(|| $args);
        if let Some(r) = $self.replayed($op, &args, $decode) {
            return r;
        }
        let r = $live;
        $self.taped($op, args, || $encode(&r));
        r
    }};
}

/// The provider world's `workloads` imports, through the same tape.
mod workloads;

impl At<'_> {
    /// A call's taped arguments: `client`'s, and for a named cluster its name
    /// first, so a replay answers each cluster's calls.
    fn tape_args(self, args: Value) -> Value {
        let At::Named(cluster) = self else {
            return args;
        };
        let mut m = serde_json::Map::new();
        m.insert("cluster".into(), json!(cluster));
        if let Value::Object(rest) = args {
            m.extend(rest);
        }
        Value::Object(m)
    }
}

/// Each cluster function once, for both `client` (`At::Own`) and `clusters`
/// (`At::Named`): the trait impls below only forward here.
impl State {
    async fn get_at(&mut self, at: At<'_>, target: ObjectRef) -> Result<String, ClientError> {
        through_tape!(
            self,
            at at,
            "get",
            json!({ "target": &target }),
            json_string_result,
            json_string_answer,
            self.get_live(at, target).await
        )
    }

    async fn list_at(
        &mut self,
        at: At<'_>,
        of: TypeRef,
        params: client::ListParams,
    ) -> Result<Vec<String>, ClientError> {
        through_tape!(
            self,
            at at,
            "list",
            json!({ "of": &of, "params": &params }),
            list_result,
            list_answer,
            self.list_live(at, of, params).await
        )
    }

    async fn create_at(&mut self, at: At<'_>, obj: String) -> Result<String, ClientError> {
        through_tape!(
            self,
            at at,
            "create",
            json!({ "obj": value_of(&obj) }),
            json_string_result,
            json_string_answer,
            self.create_live(at, obj).await
        )
    }

    async fn update_at(&mut self, at: At<'_>, obj: String) -> Result<String, ClientError> {
        through_tape!(
            self,
            at at,
            "update",
            json!({ "obj": value_of(&obj) }),
            json_string_result,
            json_string_answer,
            self.update_live(at, obj).await
        )
    }

    async fn patch_at(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        through_tape!(
            self,
            at at,
            "patch",
            json!({ "target": &target, "how": &how, "body": value_of(&body) }),
            json_string_result,
            json_string_answer,
            self.patch_live(at, target, how, body).await
        )
    }

    async fn patch_status_at(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        through_tape!(
            self,
            at at,
            "patch-status",
            json!({ "target": &target, "how": &how, "body": value_of(&body) }),
            json_string_result,
            json_string_answer,
            self.patch_status_live(at, target, how, body).await
        )
    }

    async fn delete_at(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        through_tape!(
            self,
            at at,
            "delete",
            json!({ "target": &target, "options": &options }),
            result_json,
            result_answer,
            self.delete_live(at, target, options).await
        )
    }
}

impl client::Host for State {
    async fn get(&mut self, target: ObjectRef) -> Result<String, ClientError> {
        self.get_at(At::Own, target).await
    }

    async fn list(
        &mut self,
        of: TypeRef,
        params: client::ListParams,
    ) -> Result<Vec<String>, ClientError> {
        self.list_at(At::Own, of, params).await
    }

    async fn create(&mut self, obj: String) -> Result<String, ClientError> {
        self.create_at(At::Own, obj).await
    }

    async fn update(&mut self, obj: String) -> Result<String, ClientError> {
        self.update_at(At::Own, obj).await
    }

    /// Taped as one `client.create` per object, in order: records, replays
    /// and shadows read a batch as the creates it is.
    async fn create_all(
        &mut self,
        objs: Vec<String>,
    ) -> Result<Vec<Result<String, ClientError>>, ClientError> {
        if objs.len() > MAX_CREATE_ALL {
            return Err(ClientError::Invalid(format!(
                "create-all takes at most {MAX_CREATE_ALL} objects, not {}",
                objs.len()
            )));
        }
        let args: Vec<_> = objs
            .iter()
            .map(|o| self.tape_args(|| json!({ "obj": value_of(o) })))
            .collect();
        let replayed: Vec<_> = args
            .iter()
            .map(|a| self.replayed("client.create", a, json_string_answer))
            .collect();
        if replayed.iter().all(Option::is_some) && !objs.is_empty() {
            return Ok(replayed.into_iter().flatten().collect());
        }
        let answers = self.create_all_live(objs).await;
        for (a, r) in args.into_iter().zip(&answers) {
            self.taped("client.create", a, || json_string_result(r));
        }
        Ok(answers)
    }

    async fn patch(
        &mut self,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_at(At::Own, target, how, body).await
    }

    async fn patch_status(
        &mut self,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_status_at(At::Own, target, how, body).await
    }

    async fn delete(
        &mut self,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        self.delete_at(At::Own, target, options).await
    }

    // `client` only: `clusters` has no list-changes, evict, bind or events.

    async fn list_changes(
        &mut self,
        of: TypeRef,
        params: client::ListParams,
        since: u64,
    ) -> Result<client::Changes, ClientError> {
        // A taped call must stand alone (its replay, or a shadow candidate,
        // runs on a fresh instance that holds nothing): it gets everything.
        let since = if self.tape_args(|| Value::Null).is_some() {
            0
        } else {
            since
        };
        through_tape!(
            self,
            "client.list-changes",
            json!({ "of": &of, "params": &params }),
            result_json,
            result_answer,
            self.list_changes_live(At::Own, of, params, since).await
        )
    }

    async fn evict(
        &mut self,
        namespace: String,
        name: String,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        through_tape!(
            self,
            "client.evict",
            json!({ "namespace": &namespace, "name": &name, "options": &options }),
            result_json,
            result_answer,
            self.evict_live(namespace, name, options).await
        )
    }

    async fn bind(
        &mut self,
        namespace: String,
        name: String,
        node: String,
    ) -> Result<(), ClientError> {
        through_tape!(
            self,
            "client.bind",
            json!({ "namespace": &namespace, "name": &name, "node": &node }),
            result_json,
            result_answer,
            self.bind_live(namespace, name, node).await
        )
    }

    async fn record_event(&mut self, event: Event) -> Result<(), ClientError> {
        through_tape!(
            self,
            "client.record-event",
            json!({ "event": &event }),
            result_json,
            result_answer,
            self.record_event_live(event).await
        )
    }
}

/// The named clusters' imports: `client`'s, in the cluster named first.
impl clusters::Host for State {
    async fn get(&mut self, cluster: String, target: ObjectRef) -> Result<String, ClientError> {
        self.get_at(At::Named(&cluster), target).await
    }

    async fn list(
        &mut self,
        cluster: String,
        of: TypeRef,
        params: client::ListParams,
    ) -> Result<Vec<String>, ClientError> {
        self.list_at(At::Named(&cluster), of, params).await
    }

    async fn create(&mut self, cluster: String, obj: String) -> Result<String, ClientError> {
        self.create_at(At::Named(&cluster), obj).await
    }

    async fn update(&mut self, cluster: String, obj: String) -> Result<String, ClientError> {
        self.update_at(At::Named(&cluster), obj).await
    }

    async fn patch(
        &mut self,
        cluster: String,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_at(At::Named(&cluster), target, how, body).await
    }

    async fn patch_status(
        &mut self,
        cluster: String,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_status_at(At::Named(&cluster), target, how, body)
            .await
    }

    async fn delete(
        &mut self,
        cluster: String,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        self.delete_at(At::Named(&cluster), target, options).await
    }
}

/// An HTTP body as the record holds it: text when it is UTF-8.
fn body_json(b: &[u8]) -> Value {
    use base64::Engine;
    match std::str::from_utf8(b) {
        Ok(t) => json!({ "text": t }),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
    }
}

fn body_of(v: &Value) -> Option<Vec<u8>> {
    use base64::Engine;
    if let Some(t) = v.get("text").and_then(Value::as_str) {
        return Some(t.as_bytes().to_vec());
    }
    base64::engine::general_purpose::STANDARD
        .decode(v.get("base64")?.as_str()?)
        .ok()
}

fn request_json(r: &http::Request) -> Value {
    json!({
        "method": &r.method, "url": &r.url, "headers": &r.headers,
        "body": body_json(&r.body), "timeout-ms": r.timeout_ms,
    })
}

fn response_result(r: &Result<http::Response, http::HttpError>) -> Value {
    match r {
        Ok(resp) => json!({ "ok": {
            "status": resp.status, "headers": &resp.headers, "body": body_json(&resp.body),
        }}),
        Err(e) => json!({ "err": e }),
    }
}

fn response_answer(v: Value) -> Option<Result<http::Response, http::HttpError>> {
    let Value::Object(mut m) = v else { return None };
    if let Some(ok) = m.remove("ok") {
        return Some(Ok(http::Response {
            status: ok.get("status")?.as_u64()? as u16,
            headers: serde_json::from_value(ok.get("headers")?.clone()).ok()?,
            body: body_of(ok.get("body")?)?,
        }));
    }
    serde_json::from_value(m.remove("err")?).ok().map(Err)
}

impl http::Host for State {
    async fn fetch(&mut self, req: http::Request) -> Result<http::Response, http::HttpError> {
        through_tape!(
            self,
            "http.fetch",
            request_json(&req),
            response_result,
            response_answer,
            self.fetch_live(req).await
        )
    }
}

impl log::Host for State {
    async fn enabled(&mut self, level: log::Level) -> bool {
        let args = self.tape_args(|| json!({ "level": level }));
        if let (Some(tape), Some(a)) = (&self.tape, &args)
            && tape.replaying()
            && let Some(b) = tape
                .answer("log.enabled", a.clone(), true)
                .and_then(|v| v.as_bool())
        {
            return b;
        }
        let on = self.enabled_live(level);
        self.taped("log.enabled", args, || json!(on));
        on
    }

    async fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let args =
            self.tape_args(|| json!({ "level": level, "message": &message, "fields": &fields }));
        if let (Some(tape), Some(a)) = (&self.tape, &args)
            && tape.replaying()
        {
            // A log line is no answer the guest depends on: used up if recorded, never a divergence.
            tape.answer("log.log", a.clone(), true);
        }
        self.taped("log.log", args, || Value::Null);
        if fields
            .iter()
            .any(|(k, _)| k == crate::plugin::sandbox::PANIC_FIELD)
        {
            // Reported once, as the call's failure, not also as a log line.
            let mut message = message;
            let max = crate::plugin::sandbox::MAX_PANIC_BYTES;
            if message.len() > max {
                let cut = (0..=max)
                    .rev()
                    .find(|i| message.is_char_boundary(*i))
                    .unwrap_or(0);
                message.truncate(cut);
            }
            self.panic = Some(message);
            return;
        }
        self.log_live(level, message, fields);
    }
}
