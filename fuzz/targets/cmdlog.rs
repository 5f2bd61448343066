//! Fuzz target `cmdlog`: AFL++ feeds inputs to `lockstep_fuzz::cmdlog` (see that function).

fn main() {
    afl::fuzz!(|data: &[u8]| lockstep_fuzz::cmdlog(data));
}
