//! Voter: phone votes for TV contestants (VoltDB's AsyncBenchmark): `Initialize` once, then
//! `Vote` calls with VoltDB's PhoneCallGenerator distribution. Check: the votes stored equal
//! the votes accepted, and no phone number exceeds its limit.

use std::sync::atomic::{AtomicU64, Ordering};

use lockstep_core::{Error, Value};

use crate::apps;
use crate::conn::Conn;
use crate::rng::Rng;
use crate::stats::Done;
use crate::workload::{Check, Workload};
use crate::workloads::classify;

/// Contestants in the show (VoltDB's default).
pub const CONTESTANTS: i64 = 6;
/// Votes each phone number may cast (VoltDB's default).
pub const MAX_VOTES: i64 = 2;
const CONTESTANT_NAMES: &str = "Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman,Allie Rogalski,Nita Coster,Kurt Walser,Ericka Dieter,Loraine Nygren,Tania Mattioli";
/// Some of the area codes `Initialize` loads; calls come from these.
const AREA_CODES: [i64; 24] =
    [201, 202, 203, 205, 206, 207, 208, 209, 210, 212, 213, 214, 215, 216, 217, 218, 219, 224, 225, 228, 229, 231, 234, 239];

pub struct Voter {
    /// Distinct phone numbers per area code; small values make the vote limit bite.
    phones_per_area: i64,
    accepted: AtomicU64,
    /// Votes already stored before this run (a reused database).
    baseline: AtomicU64,
}

impl Voter {
    /// `scale` is the number of distinct phone numbers per area code (default 10 million, as
    /// VoltDB; tests use small values so that the limit is reached).
    pub fn new(scale: Option<u64>) -> Voter {
        Voter { phones_per_area: scale.unwrap_or(10_000_000).max(1) as i64, accepted: AtomicU64::new(0), baseline: AtomicU64::new(0) }
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// A call as VoltDB's generator makes it: an area's favourite contestant or a uniform
    /// one, 1% of votes for the invalid contestant 999.
    fn next_vote(&self, rng: &mut Rng) -> (i64, i64) {
        let area_index = rng.range(0, AREA_CODES.len() as i64 - 1);
        let area = AREA_CODES[area_index as usize];
        let favourite = (((area_index as f64).sin() * CONTESTANTS as f64).abs() as i64 % CONTESTANTS) + 1;
        let mut contestant = if rng.chance(0.5) { favourite } else { rng.range(1, CONTESTANTS) };
        if rng.chance(0.01) {
            contestant = 999;
        }
        let phone = area * 10_000_000 + rng.range(0, self.phones_per_area - 1);
        (phone, contestant)
    }
}

impl Workload for Voter {
    async fn setup(&self, conn: &Conn) -> Result<(), Error> {
        apps::ensure_loaded(conn, &apps::VOTER, "votes").await?;
        let a = conn.call("Initialize", vec![Value::Int(CONTESTANTS), Value::from(CONTESTANT_NAMES)]).await?;
        if !a.is_success() {
            return Err(Error::unexpected(format!("Initialize failed: {}", a.describe())));
        }
        let before = conn.scalar("SELECT COUNT(*) FROM votes").await?;
        self.baseline.store(before.max(0) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn one<'a>(&'a self, conn: &'a Conn, rng: &'a mut Rng) -> impl std::future::Future<Output = (&'static str, Done)> + Send + 'a {
        let (phone, contestant) = self.next_vote(rng);
        async move {
            let r = conn.call("Vote", vec![Value::Int(phone), Value::Int(contestant), Value::Int(MAX_VOTES)]).await;
            let done = classify(r, |a| match a.int(0, 0, 0) {
                Some(0) => {
                    self.accepted.fetch_add(1, Ordering::Relaxed);
                    Done::ok("accepted")
                }
                Some(1) => Done::abort("invalid contestant"),
                Some(2) => Done::abort("over vote limit"),
                other => Done::error(format!("Vote returned {other:?}")),
            });
            ("Vote", done)
        }
    }

    async fn check(&self, conn: &Conn) -> Check {
        let mut c = Check::new();
        let accepted = (self.accepted() + self.baseline.load(Ordering::Relaxed)) as i64;
        match conn.scalar("SELECT COUNT(*) FROM votes").await {
            Ok(n) => c.expect(n == accepted, format!("votes stored {n} = votes accepted {accepted} (including earlier runs)")),
            Err(e) => c.expect(false, format!("counting votes: {}", e.message)),
        }
        match conn.call("Results", vec![]).await {
            Ok(a) if a.is_success() => {
                let sum: i64 = a
                    .rows(0)
                    .iter()
                    .filter_map(|r| match r.get(2) {
                        Some(Value::Int(v)) => Some(*v),
                        _ => None,
                    })
                    .sum();
                c.expect(sum == accepted, format!("Results total {sum} = votes accepted {accepted}"));
            }
            Ok(a) => c.expect(false, format!("Results failed: {}", a.describe())),
            Err(e) => c.expect(false, format!("Results failed: {}", e.message)),
        }
        let over = format!("SELECT COUNT(*) FROM v_votes_by_phone_number WHERE num_votes > {MAX_VOTES}");
        match conn.scalar(&over).await {
            Ok(n) => c.expect(n == 0, format!("{n} phone numbers over the limit of {MAX_VOTES}")),
            Err(e) => c.expect(false, format!("checking the vote limit: {}", e.message)),
        }
        c
    }
}
