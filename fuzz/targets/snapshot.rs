//! Fuzz target `snapshot`: AFL++ feeds inputs to `lockstep_fuzz::snapshot` (see that function).

fn main() {
    afl::fuzz!(|data: &[u8]| lockstep_fuzz::snapshot(data));
}
