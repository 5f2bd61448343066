//! The part of running a call that every front end shares (the wire protocol's connections
//! and the HTTP JSON API): the permission checks of the system procedures answered here,
//! the refusal of a cluster node that does not serve, `@Statistics` with the caller's
//! interval baselines, `@Shutdown`, and `engine.submit` with the call's latency and
//! per-procedure figures recorded once its answer is ready.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockstep_core::{Error, Value};
use lockstep_engine::stats::IntervalBaselines;
use lockstep_engine::sysproc_table::{self, AnsweredBy, SysProc};
use lockstep_engine::{auth, stats, Call, Outcome};

use crate::Front;

/// How a call was answered: the outcome, the time from receipt to answer, and whether the
/// server should stop once the answer is delivered (`@Shutdown`).
pub struct Answered {
    pub outcome: Outcome,
    pub round_trip: Duration,
    pub then_shutdown: bool,
}

/// What the caller brings besides the call: when it arrived, the interval baselines of its
/// `@Statistics … 1` reads, and how it answers `@Subscribe` (a wire connection subscribes;
/// the HTTP API, which cannot push, refuses).
pub struct Caller<'a, S> {
    pub started: Instant,
    pub baselines: Option<&'a Arc<IntervalBaselines>>,
    pub subscribe: S,
}

/// Starts `call`; `reply` gets its answer exactly once, on whichever thread finished it.
pub fn start<S, R>(front: &Arc<Front>, call: Call, caller: Caller<'_, S>, reply: R)
where
    S: FnOnce(&[Value]) -> Outcome,
    R: FnOnce(Answered) + Send + 'static,
{
    let Caller { started, baselines, subscribe } = caller;
    let reply = counted(front, &call.procedure, reply);
    let now_answer = |outcome: Outcome, then_shutdown: bool| Answered { outcome, round_trip: started.elapsed(), then_shutdown };
    let sysproc = call.procedure.starts_with('@').then(|| sysproc_table::find(&call.procedure).map(|s| s.proc)).flatten();
    if let Some(e) = refusal(front, &call, sysproc) {
        return reply(now_answer(Outcome::error(e), false));
    }
    match sysproc {
        Some(SysProc::Subscribe) => reply(now_answer(subscribe(&call.params), false)),
        Some(SysProc::Statistics) if matches!(call.params.first(), Some(Value::Str(s)) if s.eq_ignore_ascii_case("LIVECLIENTS")) => {
            reply(now_answer(Outcome::tables(vec![front.live.table()]), false))
        }
        // Answered with the caller's baselines, so that an interval read measures from the
        // caller's own last one (the permission was checked by `refusal`).
        Some(SysProc::Statistics) => {
            let answer = Box::new(move |outcome| reply(Answered { outcome, round_trip: started.elapsed(), then_shutdown: false }));
            stats::statistics_for(&front.engine, &call, baselines.cloned(), answer)
        }
        Some(SysProc::Shutdown) => {
            tracing::info!("@Shutdown called: stopping");
            reply(now_answer(Outcome::tables(Vec::new()), true))
        }
        _ => submit(front, call, sysproc, started, reply),
    }
}

/// `reply`, counting the answer by procedure first (`/metrics`). A name seen before has its
/// counters already (found without allocating); a new one is added once its answer shows
/// it is a procedure.
fn counted<R>(front: &Arc<Front>, procedure: &str, reply: R) -> impl FnOnce(Answered) + Send + 'static
where
    R: FnOnce(Answered) + Send + 'static,
{
    let counters = front.metrics.procedure(procedure);
    let first_call = counters.is_none().then(|| (procedure.to_string(), front.clone()));
    move |a: Answered| {
        match (counters, first_call) {
            (Some(c), _) => c.record(a.outcome.status, a.round_trip),
            (None, Some((name, front))) => front.metrics.record_new(&name, &a.outcome, a.round_trip),
            (None, None) => {}
        }
        reply(a)
    }
}

/// Why the front end refuses `call` before it runs: a system procedure answered here that
/// the caller may not call (the engine checks the rest), or a cluster node cut off from
/// the majority, which takes no work (a subscription and a stop still do what they say:
/// neither reads nor changes data).
fn refusal(front: &Front, call: &Call, sysproc: Option<SysProc>) -> Option<Error> {
    let answered_here = matches!(sysproc, Some(SysProc::Subscribe | SysProc::Statistics | SysProc::Shutdown));
    if let Some(who) = call.principal.as_deref().filter(|_| answered_here) {
        if let Err(e) = auth::check_system(Some(who), &front.engine.catalog(), &call.procedure) {
            return Some(e);
        }
    }
    // Every system procedure's name begins with '@': a user procedure is not looked for.
    if call.procedure.starts_with('@') && sysproc_table::find(&call.procedure).is_some_and(|s| s.answered_by == AnsweredBy::FrontEnd) {
        return None;
    }
    front.unavailable().map(Error::unavailable)
}

/// Hands the call to the engine; its latency is recorded when the answer is ready.
fn submit(front: &Arc<Front>, call: Call, sysproc: Option<SysProc>, started: Instant, reply: impl FnOnce(Answered) + Send + 'static) {
    // LATENCY counts the calls applications make: user procedures and ad-hoc SQL.
    let adhoc = sysproc == Some(SysProc::AdHoc);
    let user_call = !call.procedure.starts_with('@') || adhoc;
    let reply_front = front.clone();
    front.engine.submit(
        call,
        Box::new(move |outcome| {
            // When the answer was ready: one reading of the clock serves a batch of answers
            // (`answer_batch`), the latency window and the encoding.
            let now = lockstep_engine::answer_batch::now();
            let round_trip = now.saturating_duration_since(started);
            if user_call {
                reply_front.engine.shared().stats.latency.record_at(now, round_trip);
                reply_front.metrics.latency.record(round_trip);
            }
            if adhoc {
                reply_front.subscribers.catalog_may_have_changed(&reply_front.engine);
            }
            reply(Answered { outcome, round_trip, then_shutdown: false });
        }),
    );
}
