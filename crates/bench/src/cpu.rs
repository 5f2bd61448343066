//! CPU time spent by a process tree, read from /proc: how a run measures a server's CPU per
//! transaction. The machine's speed moves from day to day; CPU per transaction moves far
//! less, so it is the figure runs are compared by.
//!
//! A tree's time is its processes' user + system time, threads included, plus the time of
//! children they have already reaped (PostgreSQL's backends end and are reaped by the
//! postmaster while a run goes on). Linux only; elsewhere nothing is measured.

use std::collections::HashMap;
use std::time::Duration;

/// CPU time used so far by `root` and every process below it, or None when /proc cannot say
/// (not Linux, the process is gone, or its files cannot be read).
pub fn tree_cpu(root: u32) -> Option<Duration> {
    let ticks_per_s = clock_ticks_per_second()?;
    let stats = all_stats();
    stats.get(&root)?;
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, s) in &stats {
        children.entry(s.ppid).or_default().push(*pid);
    }
    let mut ticks = 0u64;
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        if let Some(s) = stats.get(&pid) {
            ticks += s.ticks;
        }
        if let Some(c) = children.get(&pid) {
            todo.extend(c);
        }
    }
    Some(Duration::from_secs_f64(ticks as f64 / ticks_per_s as f64))
}

/// This process's own CPU time (the load generator's cost per transaction).
pub fn own_cpu() -> Option<Duration> {
    tree_cpu(std::process::id())
}

struct ProcStat {
    ppid: u32,
    /// utime + stime + cutime + cstime, in clock ticks.
    ticks: u64,
}

fn all_stats() -> HashMap<u32, ProcStat> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some(s) = std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|t| parse_stat(&t)) {
            out.insert(pid, s);
        }
    }
    out
}

/// Parses /proc/PID/stat. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last ')'.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<i64>().ok());
    let ticks = [14, 15, 16, 17].iter().map(|&n| field(n).map(|v| v.max(0) as u64)).sum::<Option<u64>>()?;
    Some(ProcStat { ppid: u32::try_from(field(4)?).ok()?, ticks })
}

fn clock_ticks_per_second() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped_whole() {
        let s = parse_stat("42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 3 2 20 0 1 0").expect("parses");
        assert_eq!(s.ppid, 7);
        assert_eq!(s.ticks, 250 + 50 + 3 + 2);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_tree_includes_a_busy_child() {
        let before = tree_cpu(std::process::id()).expect("linux /proc");
        // A child that burns CPU until it is killed, still running when the tree is read.
        let mut child = std::process::Command::new("sh").arg("-c").arg("while :; do :; done").spawn().expect("sh runs");
        let child_pid = child.id();
        let mut child_cpu = Duration::ZERO;
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(50));
            child_cpu = tree_cpu(child_pid).unwrap_or_default();
            if child_cpu >= Duration::from_millis(200) {
                break;
            }
        }
        let after = tree_cpu(std::process::id()).expect("linux /proc");
        let _ = child.kill();
        let _ = child.wait();
        assert!(child_cpu >= Duration::from_millis(200), "the child used {child_cpu:?}");
        assert!(after - before >= child_cpu, "the tree ({:?}) counts the child ({child_cpu:?})", after - before);
    }
}
