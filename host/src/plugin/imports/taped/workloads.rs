//! A provider's `workloads` imports through the call's tape: recording, each
//! request to the node agent's workload runner is taped with its answer
//! (handles, exits, logs); replaying, the record answers and no module is
//! fetched, no volume made and no workload run.

use serde_json::{Value, json};

use super::{Unanswered, body_json, body_of};
use crate::plugin::provider::wasmlet::plugin::workloads::{
    self as w, FetchError, FetchProgress, FetchRequest, SpawnSpec, VolumeRequest, WorkloadError,
    WorkloadStatus,
};
use crate::plugin::sandbox::State;
use crate::plugin::tape::{result_answer, result_json};

impl<T> Unanswered for Result<T, WorkloadError> {
    fn unanswered(message: String) -> Self {
        Err(WorkloadError::Failed(message))
    }
}

impl<T> Unanswered for Result<T, FetchError> {
    fn unanswered(message: String) -> Self {
        Err(FetchError::Other(message))
    }
}

/// Workload logs as the record holds them: text when they are UTF-8.
fn logs_result(r: &Result<Vec<u8>, WorkloadError>) -> Value {
    match r {
        Ok(b) => json!({ "ok": body_json(b) }),
        Err(e) => json!({ "err": e }),
    }
}

fn logs_answer(v: Value) -> Option<Result<Vec<u8>, WorkloadError>> {
    let Value::Object(mut m) = v else { return None };
    if let Some(ok) = m.remove("ok") {
        return body_of(&ok).map(Ok);
    }
    serde_json::from_value(m.remove("err")?).ok().map(Err)
}

impl w::Host for State {
    async fn fetch_module(&mut self, req: FetchRequest) -> Result<FetchProgress, FetchError> {
        through_tape!(
            self,
            "workloads.fetch-module",
            json!({ "req": &req }),
            result_json,
            result_answer,
            self.fetch_module_live(req).await
        )
    }

    async fn prepare_volume(&mut self, req: VolumeRequest) -> Result<u64, WorkloadError> {
        through_tape!(
            self,
            "workloads.prepare-volume",
            json!({ "req": &req }),
            result_json,
            result_answer,
            self.prepare_volume_live(req)
        )
    }

    async fn spawn(&mut self, spec: SpawnSpec) -> Result<u64, WorkloadError> {
        through_tape!(
            self,
            "workloads.spawn",
            json!({ "spec": &spec }),
            result_json,
            result_answer,
            self.spawn_live(spec)
        )
    }

    async fn status(&mut self, handle: u64) -> Result<WorkloadStatus, WorkloadError> {
        through_tape!(
            self,
            "workloads.status",
            json!({ "handle": handle }),
            result_json,
            result_answer,
            self.status_live(handle)
        )
    }

    async fn kill(&mut self, handle: u64, grace_ms: u32) -> Result<(), WorkloadError> {
        through_tape!(
            self,
            "workloads.kill",
            json!({ "handle": handle, "grace-ms": grace_ms }),
            result_json,
            result_answer,
            self.kill_live(handle, grace_ms)
        )
    }

    async fn read_logs(&mut self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, WorkloadError> {
        through_tape!(
            self,
            "workloads.read-logs",
            json!({ "handle": handle, "max-bytes": max_bytes }),
            logs_result,
            logs_answer,
            self.read_logs_live(handle, max_bytes)
        )
    }

    async fn release_pod(&mut self, pod_uid: String) {
        let args = self.tape_args(|| json!({ "pod-uid": &pod_uid }));
        if let (Some(tape), Some(a)) = (&self.tape, &args)
            && tape.replaying()
        {
            // Nothing to answer, but a release the record lacks is a divergence.
            tape.answer("workloads.release-pod", a.clone(), false);
            return;
        }
        self.release_pod_live(&pod_uid);
        self.taped("workloads.release-pod", args, || Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_and_workload_answers_read_back_as_the_guest_got_them() {
        for r in [
            Ok(b"hello\n".to_vec()),
            Ok(vec![0xff, 0, 1]),
            Err(WorkloadError::UnknownHandle),
        ] {
            let back = logs_answer(logs_result(&r)).expect("an answer");
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
        }
        let status: Result<WorkloadStatus, WorkloadError> = Ok(WorkloadStatus {
            state: w::RunState::Exited(3),
            started_at_ms: 1,
            finished_at_ms: Some(2),
        });
        let back: Result<WorkloadStatus, WorkloadError> =
            result_answer(result_json(&status)).expect("an answer");
        assert_eq!(format!("{back:?}"), format!("{status:?}"));
        let pending: Result<FetchProgress, FetchError> = Ok(FetchProgress::Pending(4));
        let back: Result<FetchProgress, FetchError> =
            result_answer(result_json(&pending)).expect("an answer");
        assert_eq!(format!("{back:?}"), format!("{pending:?}"));
    }
}
