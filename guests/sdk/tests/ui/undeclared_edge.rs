// `Done => Start` is not a declared edge, so `Transition::next(self, Start)` in Done
// must not compile.
use serde::{Deserialize, Serialize};
use wasmlet_sdk::provider::{Pod, PodState, State, StateError, Transition, WakeEvent};

#[derive(Serialize, Deserialize)]
struct Machine;
impl PodState for Machine {
    fn new(_: &Pod) -> Result<Self, StateError> {
        Ok(Machine)
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Start;
#[derive(Serialize, Deserialize)]
struct Done;

impl State<Machine> for Start {
    const NAME: &'static str = "Start";
    fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
        Ok(Transition::next(self, Done))
    }
}

impl State<Machine> for Done {
    const NAME: &'static str = "Done";
    fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
        Ok(Transition::next(self, Start))
    }
}

wasmlet_sdk::edges! {
    Machine {
        Start => Done,
    }
}

wasmlet_sdk::provider!(Machine, initial = Start, on_delete = Done, error = Done);

fn main() {}
