//! Fuzz target `sql`: AFL++ feeds inputs to `lockstep_fuzz::sql` (see that function).

fn main() {
    afl::fuzz!(|data: &[u8]| lockstep_fuzz::sql(data));
}
