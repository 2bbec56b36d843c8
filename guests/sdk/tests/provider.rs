//! The provider half of the SDK: the typestate machine, the edge list the `graph`
//! export reports, and the `init`/`handle`/`status` glue as the host will drive it.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;
use wasmlet_sdk::bindings::provider_exports as raw;
use wasmlet_sdk::provider::{
    Pod, PodState, State, StateError, StateId, Transition, WaitOn, WakeEvent,
};
use wasmlet_sdk::testing::FakeHost;

#[derive(Debug, Serialize, Deserialize)]
struct Runner {
    pulls: u32,
}

impl PodState for Runner {
    fn new(_pod: &Pod) -> Result<Self, StateError> {
        Ok(Runner { pulls: 0 })
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Registered;
#[derive(Serialize, Deserialize)]
struct ImagePull;
#[derive(Serialize, Deserialize)]
struct ImagePullBackOff {
    delay_ms: u64,
}
#[derive(Serialize, Deserialize)]
struct Running {
    handle: u64,
}
#[derive(Serialize, Deserialize)]
struct Terminated;

impl State<Runner> for Registered {
    const NAME: &'static str = "Registered";
    fn next(
        self,
        _: &Pod,
        _: &mut Runner,
        _: Option<&WakeEvent>,
    ) -> Result<Transition<Runner>, StateError> {
        Ok(Transition::next(self, ImagePull))
    }
}

impl State<Runner> for ImagePull {
    const NAME: &'static str = "ImagePull";
    fn next(
        self,
        pod: &Pod,
        st: &mut Runner,
        _: Option<&WakeEvent>,
    ) -> Result<Transition<Runner>, StateError> {
        st.pulls += 1;
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone());
        match image.as_deref() {
            Some("good") => Ok(Transition::next(self, Running { handle: 42 })),
            Some(_) => Ok(Transition::next(
                self,
                ImagePullBackOff { delay_ms: 10_000 },
            )),
            None => Err(StateError::new("no image")),
        }
    }
    fn status(&self, _: &Pod, _: &Runner) -> serde_json::Value {
        json!({ "phase": "Pending", "reason": "Pulling" })
    }
}

impl State<Runner> for ImagePullBackOff {
    const NAME: &'static str = "ImagePullBackOff";
    fn next(
        self,
        _: &Pod,
        _: &mut Runner,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<Runner>, StateError> {
        match wake {
            Some(WakeEvent::TimerElapsed) => Ok(Transition::next(self, ImagePull)),
            _ => {
                let delay = Duration::from_millis(self.delay_ms);
                Ok(Transition::wait(
                    self,
                    [WaitOn::Timer(delay), WaitOn::PodChanged],
                ))
            }
        }
    }
}

impl State<Runner> for Running {
    const NAME: &'static str = "Running";
    fn next(
        self,
        _: &Pod,
        _: &mut Runner,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<Runner>, StateError> {
        match wake {
            Some(WakeEvent::WorkloadExited(h)) if *h == self.handle => {
                Ok(Transition::next(self, Terminated))
            }
            _ => {
                let on = [WaitOn::WorkloadExited(self.handle)];
                Ok(Transition::wait(self, on))
            }
        }
    }
}

impl State<Runner> for Terminated {
    const NAME: &'static str = "Terminated";
    fn next(
        self,
        _: &Pod,
        _: &mut Runner,
        _: Option<&WakeEvent>,
    ) -> Result<Transition<Runner>, StateError> {
        Ok(Transition::wait(self, []))
    }
    fn status(&self, _: &Pod, _: &Runner) -> serde_json::Value {
        json!({ "phase": "Succeeded" })
    }
}

wasmlet_sdk::edges! {
    Runner {
        Registered => ImagePull,
        ImagePull => [Running, ImagePullBackOff],
        ImagePullBackOff => ImagePull,
        Running => Terminated,
    }
}

wasmlet_sdk::provider!(
    Runner,
    initial = Registered,
    on_delete = Terminated,
    error = Terminated,
    backoff = [ImagePullBackOff]
);

fn pod(image: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p", "namespace": "ns", "uid": "u1" },
        "spec": { "containers": [{ "name": "main", "image": image }] },
    })
    .to_string()
}

fn expect_transition(out: raw::HandlerOutcome) -> raw::Transition {
    match out {
        raw::HandlerOutcome::Transition(t) => t,
        raw::HandlerOutcome::Wait(w) => {
            panic!("expected a transition, got a wait on {} events", w.on.len())
        }
    }
}

fn expect_wait(out: raw::HandlerOutcome) -> raw::Wait {
    match out {
        raw::HandlerOutcome::Wait(w) => w,
        raw::HandlerOutcome::Transition(t) => {
            panic!("expected a wait, got a transition to {}", t.to)
        }
    }
}

#[test]
fn graph_lists_states_and_declared_edges() {
    let g = wasmlet_sdk::provider::__graph::<Runner>(
        StateId::of::<Runner, Registered>(),
        StateId::of::<Runner, Terminated>(),
        StateId::of::<Runner, Terminated>(),
        &[StateId::of::<Runner, ImagePullBackOff>()],
    )
    .unwrap();
    assert_eq!(g.initial, "Registered");
    assert_eq!(g.on_delete, "Terminated");
    assert_eq!(g.error_state, "Terminated");
    assert_eq!(g.backoff_states, vec!["ImagePullBackOff"]);
    let edges: Vec<(&str, &str)> = g
        .edges
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        edges,
        vec![
            ("Registered", "ImagePull"),
            ("ImagePull", "Running"),
            ("ImagePull", "ImagePullBackOff"),
            ("ImagePullBackOff", "ImagePull"),
            ("Running", "Terminated"),
        ]
    );
    let mut states = g.states.clone();
    states.sort();
    assert_eq!(
        states,
        vec![
            "ImagePull",
            "ImagePullBackOff",
            "Registered",
            "Running",
            "Terminated"
        ]
    );
}

#[test]
fn a_pod_runs_to_completion_through_waits() {
    let p = pod("good");
    let data = wasmlet_sdk::provider::__init::<Runner, Registered>(p.clone()).unwrap();
    let t = expect_transition(
        wasmlet_sdk::provider::__handle::<Runner>("Registered".into(), p.clone(), data, None)
            .unwrap(),
    );
    assert_eq!(t.to, "ImagePull");
    let status = wasmlet_sdk::provider::__status::<Runner>(
        "ImagePull".into(),
        p.clone(),
        t.state_data.clone(),
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&status).unwrap(),
        json!({ "phase": "Pending", "reason": "Pulling" })
    );

    let t = expect_transition(
        wasmlet_sdk::provider::__handle::<Runner>(
            "ImagePull".into(),
            p.clone(),
            t.state_data,
            None,
        )
        .unwrap(),
    );
    assert_eq!(t.to, "Running");
    // The shared pod state travelled with the data.
    let envelope: serde_json::Value = serde_json::from_str(&t.state_data).unwrap();
    assert_eq!(
        envelope,
        json!({ "pod": { "pulls": 1 }, "state": { "handle": 42 } })
    );

    let w = expect_wait(
        wasmlet_sdk::provider::__handle::<Runner>("Running".into(), p.clone(), t.state_data, None)
            .unwrap(),
    );
    assert!(matches!(w.on.as_slice(), [raw::WaitOn::WorkloadExited(42)]));
    let t = expect_transition(
        wasmlet_sdk::provider::__handle::<Runner>(
            "Running".into(),
            p.clone(),
            w.state_data,
            Some(raw::WakeEvent::WorkloadExited(42)),
        )
        .unwrap(),
    );
    assert_eq!(t.to, "Terminated");
}

#[test]
fn back_off_waits_on_a_timer_then_retries() {
    let p = pod("bad");
    let data = wasmlet_sdk::provider::__init::<Runner, Registered>(p.clone()).unwrap();
    let t = expect_transition(
        wasmlet_sdk::provider::__handle::<Runner>("ImagePull".into(), p.clone(), data, None)
            .unwrap(),
    );
    assert_eq!(t.to, "ImagePullBackOff");
    let w = expect_wait(
        wasmlet_sdk::provider::__handle::<Runner>(t.to, p.clone(), t.state_data, None).unwrap(),
    );
    assert!(matches!(
        w.on.as_slice(),
        [raw::WaitOn::Timer(10_000), raw::WaitOn::PodChanged]
    ));
    let t = expect_transition(
        wasmlet_sdk::provider::__handle::<Runner>(
            "ImagePullBackOff".into(),
            p,
            w.state_data,
            Some(raw::WakeEvent::TimerElapsed),
        )
        .unwrap(),
    );
    assert_eq!(t.to, "ImagePull");
}

#[test]
fn handler_errors_and_unknown_states_are_reported() {
    let p = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": { "containers": [] } }).to_string();
    let data = wasmlet_sdk::provider::__init::<Runner, Registered>(p.clone()).unwrap();
    let err = wasmlet_sdk::provider::__handle::<Runner>(
        "ImagePull".into(),
        p.clone(),
        data.clone(),
        None,
    )
    .unwrap_err();
    assert_eq!(err, "ImagePull: no image");
    let err =
        wasmlet_sdk::provider::__handle::<Runner>("Nowhere".into(), p, data, None).unwrap_err();
    assert!(err.contains("unknown state"), "{err}");
}

#[test]
fn transition_values_are_inspectable_in_unit_tests() {
    let t: Transition<Runner> = Transition::next(Registered, ImagePull);
    assert_eq!(t.target(), Some("ImagePull"));
    let w: Transition<Runner> =
        Transition::wait(Running { handle: 1 }, [WaitOn::WorkloadExited(1)]);
    assert_eq!(w.waits_on(), Some(&[WaitOn::WorkloadExited(1)][..]));
}

/// A second machine whose two `Start` types (in different modules) carry one name:
/// before `State::NAME`, both were `Start` by their type name's tail too.
mod clash {
    use super::*;

    #[derive(Debug, Serialize, Deserialize)]
    pub struct Clash;
    impl PodState for Clash {
        fn new(_pod: &Pod) -> Result<Self, StateError> {
            Ok(Clash)
        }
    }

    pub mod first {
        use super::*;
        #[derive(Default, Serialize, Deserialize)]
        pub struct Start;
        impl State<Clash> for Start {
            const NAME: &'static str = "Start";
            fn next(
                self,
                _: &Pod,
                _: &mut Clash,
                _: Option<&WakeEvent>,
            ) -> Result<Transition<Clash>, StateError> {
                Ok(Transition::next(self, super::second::Start))
            }
        }
    }

    pub mod second {
        use super::*;
        #[derive(Default, Serialize, Deserialize)]
        pub struct Start;
        impl State<Clash> for Start {
            const NAME: &'static str = "Start";
            fn next(
                self,
                _: &Pod,
                _: &mut Clash,
                _: Option<&WakeEvent>,
            ) -> Result<Transition<Clash>, StateError> {
                Ok(Transition::wait(self, []))
            }
        }
    }

    use first::Start as FirstStart;
    use second::Start as SecondStart;

    wasmlet_sdk::edges! {
        Clash {
            FirstStart => SecondStart,
        }
    }
}

#[test]
fn two_states_with_one_name_are_rejected_when_the_graph_is_built() {
    use clash::{Clash, first, second};
    let err = wasmlet_sdk::provider::__graph::<Clash>(
        StateId::of::<Clash, first::Start>(),
        StateId::of::<Clash, second::Start>(),
        StateId::of::<Clash, second::Start>(),
        &[],
    )
    .unwrap_err();
    assert!(err.contains(r#"both named "Start""#), "{err}");
    assert!(err.contains("clash::first::Start"), "{err}");
    assert!(err.contains("clash::second::Start"), "{err}");
}

#[test]
fn the_graph_export_logs_the_name_clash_and_traps() {
    use clash::{Clash, first, second};
    let host = FakeHost::new();
    let _guard = host.install();
    let outcome = std::panic::catch_unwind(|| {
        wasmlet_sdk::provider::__graph_or_trap::<Clash>(
            StateId::of::<Clash, first::Start>(),
            StateId::of::<Clash, second::Start>(),
            StateId::of::<Clash, second::Start>(),
            &[],
        )
    });
    assert!(outcome.is_err(), "a clash must not yield a graph");
    let logs = host.logs();
    assert!(
        logs.iter().any(|(level, message)| level == "error"
            && message.starts_with("invalid state graph: states ")
            && message.contains(r#"both named "Start""#)),
        "{logs:?}"
    );
}
