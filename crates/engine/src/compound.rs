//! The compound-procedure threads: run compound procedures (Lua bodies marked
//! `compound = true`) outside every partition. Each invocation is a Lua coroutine; the
//! calls it issues go through `Engine::submit` like a client's (so single-partition calls
//! run on their partitions alongside everything else, and in a cluster are forwarded to
//! their leaders), and their answers come back to the invocation's thread as messages that
//! resume it.
//! The thread never waits on a call: it only ever waits for its next message.
//!
//! A compound procedure is not a transaction: each call it issues commits on its own, and
//! nothing undoes the earlier calls when a later one fails (as VoltDB's compound procedures).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use lockstep_core::{get_ignoring_case, Error, ProcedureBody, Value};
use lockstep_procs::{CallAnswer, CompoundRuntime, IssuedCall, Step};

use crate::auth::Principal;
use crate::engine::{Call, Engine};
use crate::outcome::{Outcome, Reply};
use crate::registry::ProcRoute;

/// Compound invocations running (started, not yet answered) at most; a call beyond them is
/// refused as overload, so answers waiting in memory stay bounded.
pub const COMPOUND_IN_FLIGHT_MAX: usize = 10_000;
/// Compound threads, each with its own Lua state; invocations are dealt to them in turn,
/// and an invocation stays on its thread.
pub const COMPOUND_THREADS: usize = 2;
/// How often the thread looks for invocations whose time has run out, in ms.
const COMPOUND_SWEEP_MS: u64 = 100;

/// What the compound thread is sent.
pub(crate) enum CompoundMsg {
    Start {
        name: Arc<str>,
        params: Vec<Value>,
        principal: Option<Arc<Principal>>,
        timeout: Option<Duration>,
        reply: Reply,
    },
    /// The answer to call `index` of invocation `id`.
    Answer {
        id: u64,
        index: usize,
        outcome: Outcome,
    },
    Shutdown,
}

/// The way to the compound thread, held by the engine.
#[derive(Clone)]
pub(crate) struct CompoundLink {
    /// One queue per compound thread.
    txs: Arc<[Sender<CompoundMsg>]>,
    /// The thread the next invocation goes to.
    next: Arc<AtomicUsize>,
    /// Invocations started and not yet answered (see `COMPOUND_IN_FLIGHT_MAX`).
    in_flight: Arc<AtomicUsize>,
}

impl CompoundLink {
    /// Starts compound procedure `name`, unless `COMPOUND_IN_FLIGHT_MAX` already run.
    pub(crate) fn start(&self, name: Arc<str>, call: Call, timeout: Option<Duration>, reply: Reply) {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= COMPOUND_IN_FLIGHT_MAX {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return reply(Outcome::error(Error::unavailable(format!(
                "the server is overloaded: {COMPOUND_IN_FLIGHT_MAX} compound procedure calls are running; slow down and retry"
            ))));
        }
        let msg = CompoundMsg::Start { name, params: call.params, principal: call.principal, timeout, reply };
        let tx = &self.txs[self.next.fetch_add(1, Ordering::Relaxed) % self.txs.len()];
        if let Err(e) = tx.send(msg) {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            if let CompoundMsg::Start { reply, .. } = e.0 {
                reply(Outcome::error(Error::unavailable("the server is shutting down")));
            }
        }
    }

    pub(crate) fn shutdown(&self) {
        for tx in self.txs.iter() {
            let _ = tx.send(CompoundMsg::Shutdown);
        }
    }
}

/// The queues of `COMPOUND_THREADS` compound threads not started yet (the engine starts
/// them once it exists): the link, and each thread's own (sender, receiver).
pub(crate) fn channels() -> (CompoundLink, Vec<(Sender<CompoundMsg>, Receiver<CompoundMsg>)>) {
    let queues: Vec<_> = (0..COMPOUND_THREADS).map(|_| crossbeam_channel::unbounded()).collect();
    let txs: Arc<[Sender<CompoundMsg>]> = queues.iter().map(|(tx, _)| tx.clone()).collect();
    (CompoundLink { txs, next: Arc::default(), in_flight: Arc::new(AtomicUsize::new(0)) }, queues)
}

/// One invocation waiting for the answers to its calls.
struct Invocation {
    reply: Reply,
    principal: Option<Arc<Principal>>,
    deadline: Option<Instant>,
    answers: Vec<Option<CallAnswer>>,
    waiting: usize,
}

/// The thread's state.
pub(crate) struct CompoundThread {
    engine: Weak<Engine>,
    rx: Receiver<CompoundMsg>,
    tx: Sender<CompoundMsg>,
    in_flight: Arc<AtomicUsize>,
    runtime: CompoundRuntime,
    invocations: HashMap<u64, Invocation>,
}

impl CompoundThread {
    /// A thread reading `rx`, whose calls' answers come back through `tx` (its own queue).
    pub(crate) fn new(
        engine: Weak<Engine>,
        link: &CompoundLink,
        (tx, rx): (Sender<CompoundMsg>, Receiver<CompoundMsg>),
    ) -> lockstep_core::Result<Self> {
        let config = engine.upgrade().map(|e| e.shared().config.clone()).ok_or_else(|| Error::unexpected("the engine stopped"))?;
        let runtime = CompoundRuntime::new(config.lua_memory_limit_bytes, config.lua_instruction_budget)?;
        Ok(CompoundThread { engine, rx, tx, in_flight: link.in_flight.clone(), runtime, invocations: HashMap::new() })
    }

    pub(crate) fn run(mut self) {
        let sweep = Duration::from_millis(COMPOUND_SWEEP_MS);
        let mut swept = Instant::now();
        loop {
            match self.rx.recv_timeout(Duration::from_millis(COMPOUND_SWEEP_MS)) {
                Ok(CompoundMsg::Start { name, params, principal, timeout, reply }) => self.start(&name, params, principal, timeout, reply),
                Ok(CompoundMsg::Answer { id, index, outcome }) => self.answer(id, index, outcome),
                Ok(CompoundMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                // An engine dropped without a shutdown leaves nobody to send one.
                Err(RecvTimeoutError::Timeout) if self.engine.strong_count() == 0 => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            // Not after every message: the sweep looks at every invocation in flight.
            if swept.elapsed() >= sweep {
                self.expire();
                swept = Instant::now();
            }
        }
        for (id, inv) in std::mem::take(&mut self.invocations) {
            self.runtime.abandon(id);
            self.answer_caller(inv.reply, Outcome::error(Error::unavailable("the server is shutting down")));
        }
    }

    fn start(&mut self, name: &str, params: Vec<Value>, principal: Option<Arc<Principal>>, timeout: Option<Duration>, reply: Reply) {
        let Some(engine) = self.engine.upgrade() else {
            return self.answer_caller(reply, Outcome::error(Error::unavailable("the server is shutting down")));
        };
        let catalog = engine.catalog();
        let Some(ProcedureBody::Lua { path, source }) = catalog.procedure(name).map(|d| &d.body) else {
            return self.answer_caller(reply, Outcome::error(Error::unexpected(format!("Procedure {name} was not found"))));
        };
        let (id, step) = self.runtime.start(name, path, source, &params);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let inv = Invocation { reply, principal, deadline, answers: Vec::new(), waiting: 0 };
        self.step(&engine, id, inv, step);
    }

    fn answer(&mut self, id: u64, index: usize, outcome: Outcome) {
        // An invocation that timed out is gone: its late answers are dropped.
        let Some(inv) = self.invocations.get_mut(&id) else { return };
        if let Some(slot) = inv.answers.get_mut(index).filter(|s| s.is_none()) {
            *slot = Some(to_answer(outcome));
            inv.waiting -= 1;
        }
        if inv.waiting > 0 {
            return;
        }
        let Some(mut inv) = self.invocations.remove(&id) else { return };
        let Some(engine) = self.engine.upgrade() else {
            return self.answer_caller(inv.reply, Outcome::error(Error::unavailable("the server is shutting down")));
        };
        let answers = std::mem::take(&mut inv.answers).into_iter().map(Option::unwrap_or_default).collect();
        let step = self.runtime.resume(id, answers);
        self.step(&engine, id, inv, step);
    }

    /// Acts on what invocation `id` does next: answers its caller, or issues its calls.
    fn step(&mut self, engine: &Engine, id: u64, mut inv: Invocation, step: Step) {
        let calls = match step {
            Step::Done(Ok(out)) => return self.answer_caller(inv.reply, Outcome::from_output(out)),
            Step::Done(Err(failure)) => {
                let mut outcome = Outcome::error(failure.error);
                outcome.app_status = failure.app_status;
                return self.answer_caller(inv.reply, outcome);
            }
            Step::Calls(calls) => calls,
        };
        let remaining = match inv.deadline.map(|d| d.saturating_duration_since(Instant::now())) {
            Some(left) if left.is_zero() => {
                self.runtime.abandon(id);
                return self.answer_caller(inv.reply, Outcome::error(timed_out()));
            }
            other => other,
        };
        inv.answers = vec![None; calls.len()];
        inv.waiting = calls.len();
        let principal = inv.principal.clone();
        self.invocations.insert(id, inv);
        for (index, call) in calls.into_iter().enumerate() {
            self.issue(engine, id, index, call, principal.clone(), remaining);
        }
    }

    /// Submits one call like a client's; its answer comes back as a message.
    fn issue(&self, engine: &Engine, id: u64, index: usize, call: IssuedCall, principal: Option<Arc<Principal>>, left: Option<Duration>) {
        let tx = self.tx.clone();
        let reply: Reply = Box::new(move |outcome| {
            // The thread is gone only when the server stops: nobody waits for the answer.
            let _ = tx.send(CompoundMsg::Answer { id, index, outcome });
        });
        let nested = get_ignoring_case(&engine.shared().view().procs, &call.procedure).is_some_and(|p| p.route == ProcRoute::Compound);
        if nested {
            return reply(Outcome::error(Error::graceful(format!(
                "{} is a compound procedure: a compound procedure cannot call another; call its single-partition procedures instead",
                call.procedure
            ))));
        }
        // The call may take what is left of the compound procedure's time, at least 1 ms.
        let timeout_ms = left.map(|d| i32::try_from(d.as_millis().max(1)).unwrap_or(i32::MAX));
        engine.submit(Call { procedure: call.procedure, params: call.params, timeout_ms, principal, ..Call::default() }, reply);
    }

    /// Fails the invocations whose time has run out; their late answers are dropped.
    fn expire(&mut self) {
        let now = Instant::now();
        let expired: Vec<u64> =
            self.invocations.iter().filter(|(_, inv)| inv.deadline.is_some_and(|d| d <= now)).map(|(id, _)| *id).collect();
        for id in expired {
            if let Some(inv) = self.invocations.remove(&id) {
                self.runtime.abandon(id);
                self.answer_caller(inv.reply, Outcome::error(timed_out()));
            }
        }
    }

    fn answer_caller(&self, reply: Reply, outcome: Outcome) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        reply(outcome);
    }
}

fn to_answer(o: Outcome) -> CallAnswer {
    CallAnswer { status: o.status, message: o.status_string, app_status: o.app_status, tables: o.tables }
}

fn timed_out() -> Error {
    Error::graceful(format!(
        "{} the query timeout: the calls of the compound procedure had not finished",
        lockstep_procs::PROCEDURE_TIMEOUT_MESSAGE_START
    ))
}

#[cfg(test)]
mod tests {
    use crate::cmdlog::testing::TempDir;
    use crate::mp::tests::run;
    use crate::{Call, Engine, EngineConfig};
    use lockstep_core::{ResultTable, Value};
    use std::sync::Arc;

    fn ddl(engine: &Engine, sql: &str) {
        let (tx, rx) = std::sync::mpsc::channel();
        engine.adhoc(sql, vec![], Box::new(move |o| tx.send(o).unwrap()));
        let o = rx.recv().unwrap();
        assert!(o.is_success(), "{sql}: {:?}", o.status_string);
    }

    /// An engine of 4 sites with a number map (partitioned on the number), subscribers
    /// (partitioned on the id), and the compound procedure `Move` that looks the number up
    /// and updates the subscriber.
    fn start(name: &str) -> (Arc<Engine>, TempDir) {
        let dir = TempDir::new(&format!("compound-{name}"));
        let mut config = EngineConfig::new(dir.path());
        config.sites = 4;
        let e = Engine::start(config).unwrap();
        for sql in [
            "CREATE TABLE m (nbr VARCHAR(8) NOT NULL, id BIGINT NOT NULL, PRIMARY KEY (nbr))",
            "PARTITION TABLE m ON COLUMN nbr",
            "CREATE TABLE s (id BIGINT NOT NULL, loc BIGINT, PRIMARY KEY (id))",
            "PARTITION TABLE s ON COLUMN id",
            "CREATE PROCEDURE SetLoc PARTITION ON TABLE s COLUMN id PARAMETER 1 AS UPDATE s SET loc = ? WHERE id = ?",
            "CREATE PROCEDURE Move FROM FILE 'move.lua' SOURCE $lua$compound = true
             return function(nbr, loc)
               local found = call('M.select', nbr)
               if not found.ok then abort('lookup failed: ' .. found.message, 3) end
               local row = found.tables[1][1]
               if not row then return -1 end
               local done = call('SetLoc', loc, row.id)
               if not done.ok then abort(done.message) end
               return 0
             end$lua$",
            "CREATE PROCEDURE Probe FROM FILE 'probe.lua' SOURCE $lua$compound = true
             return function(name)
               local a = call(name)
               return a.ok and 'ok' or (a.status .. ' ' .. a.message)
             end$lua$",
        ] {
            ddl(&e, sql);
        }
        for i in 0..40i64 {
            assert!(run(&e, "M.insert", vec![Value::Str(format!("n{i}").into()), Value::Int(i)]).is_success());
            assert!(run(&e, "S.insert", vec![Value::Int(i), Value::Int(0)]).is_success());
        }
        (e, dir)
    }

    fn loc_sum(e: &Engine) -> i64 {
        let (tx, rx) = std::sync::mpsc::channel();
        e.adhoc("SELECT SUM(loc) FROM s", vec![], Box::new(move |o| tx.send(o).unwrap()));
        match rx.recv().unwrap().tables[0].rows[0][0] {
            Value::Int(n) => n,
            ref other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_compound_procedure_chains_single_partition_calls() {
        let (e, _dir) = start("chain");
        let o = run(&e, "Move", vec![Value::Str("n7".into()), Value::Int(5)]);
        assert!(o.is_success(), "{:?}", o.status_string);
        assert_eq!(o.tables, vec![ResultTable::scalar("", 0)]);
        assert_eq!(loc_sum(&e), 5);
        assert_eq!(run(&e, "Move", vec![Value::Str("nope".into()), Value::Int(5)]).tables, vec![ResultTable::scalar("", -1)]);
        e.shutdown();
    }

    #[test]
    fn many_compound_calls_run_at_once_from_several_threads() {
        let (e, _dir) = start("many");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let e = e.clone();
                std::thread::spawn(move || {
                    let (tx, rx) = std::sync::mpsc::channel();
                    for i in 0..10 {
                        let tx = tx.clone();
                        let params = vec![Value::Str(format!("n{}", t * 10 + i).into()), Value::Int(1)];
                        e.submit(Call { procedure: "Move".into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
                    }
                    (0..10).map(|_| rx.recv().unwrap()).filter(|o| o.tables == vec![ResultTable::scalar("", 0)]).count()
                })
            })
            .collect();
        let done: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(done, 40);
        assert_eq!(loc_sum(&e), 40);
        e.shutdown();
    }

    #[test]
    fn an_inner_failure_reaches_the_body() {
        let (e, _dir) = start("failure");
        let o = run(&e, "Probe", vec![Value::Str("NoSuchProc".into())]);
        assert_eq!(o.tables[0].rows[0][0], Value::Str("-3 Procedure NoSuchProc was not found".into()));
        e.shutdown();
    }

    #[test]
    fn an_abort_answers_with_its_message_and_app_status() {
        let (e, _dir) = start("abort");
        // The lookup gets a wrong parameter count: the body aborts with app status 3.
        ddl(
            &e,
            "CREATE PROCEDURE Bad FROM FILE 'bad.lua' SOURCE $lua$compound = true
             return function() local a = call('M.select') if not a.ok then abort('lookup failed', 3) end return 0 end$lua$",
        );
        let o = run(&e, "Bad", vec![]);
        assert!(!o.is_success());
        assert_eq!(o.status_string.as_deref(), Some("lookup failed"));
        assert_eq!(o.app_status, 3);
        e.shutdown();
    }

    #[test]
    fn a_compound_procedure_cannot_call_another() {
        let (e, _dir) = start("nested");
        let o = run(&e, "Probe", vec![Value::Str("Probe".into())]);
        let text = format!("{:?}", o.tables[0].rows[0][0]);
        assert!(text.contains("a compound procedure cannot call another"), "{text}");
        e.shutdown();
    }

    #[test]
    fn the_query_timeout_bounds_the_whole_invocation() {
        let (e, _dir) = start("timeout");
        ddl(
            &e,
            "CREATE PROCEDURE Spin PARTITION ON TABLE s COLUMN id PARAMETER 0 FROM FILE 'spin.lua' SOURCE $lua$
             return function(id) while true do end end$lua$",
        );
        // Each call fails at the time left; the body keeps calling until none is left.
        ddl(
            &e,
            "CREATE PROCEDURE Spinner FROM FILE 'spinner.lua' SOURCE $lua$compound = true
             return function() for i = 1, 60 do call('Spin', 1) end return 'never' end$lua$",
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let call = Call { procedure: "Spinner".into(), timeout_ms: Some(100), ..Default::default() };
        e.submit(call, Box::new(move |o| tx.send(o).unwrap()));
        let o = rx.recv().unwrap();
        assert!(!o.is_success());
        let text = o.status_string.unwrap_or_default();
        assert!(lockstep_procs::is_procedure_timeout(&lockstep_core::Error::graceful(text.clone())), "{text}");
        e.shutdown();
    }

    #[test]
    fn a_compound_procedure_cannot_be_partitioned() {
        let (e, _dir) = start("partitioned");
        let (tx, rx) = std::sync::mpsc::channel();
        e.adhoc(
            "CREATE PROCEDURE P2 PARTITION ON TABLE s COLUMN id PARAMETER 0 FROM FILE 'p2.lua' SOURCE $lua$compound = true
             return function(id) return 0 end$lua$",
            vec![],
            Box::new(move |o| tx.send(o).unwrap()),
        );
        let o = rx.recv().unwrap();
        assert!(o.status_string.unwrap_or_default().contains("declare it without PARTITION ON"));
        e.shutdown();
    }
}
