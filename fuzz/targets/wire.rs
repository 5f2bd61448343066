//! Fuzz target `wire`: AFL++ feeds inputs to `lockstep_fuzz::wire` (see that function).

fn main() {
    afl::fuzz!(|data: &[u8]| lockstep_fuzz::wire(data));
}
