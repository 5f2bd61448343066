//! Bank: money moved between accounts partitioned by id (`apps/bank`). Each transaction is
//! `Transfer(from, to, amount)` between two random accounts, nearly always on two
//! partitions: a multi-partition transaction that writes both atomically. Check: the total
//! of all balances is what it was before the run (no money made or lost), no balance is
//! negative (no double spend), and no account appeared or vanished.

use std::sync::atomic::{AtomicI64, Ordering};

use lockstep_core::{Error, Value};

use crate::apps;
use crate::conn::Conn;
use crate::rng::Rng;
use crate::stats::Done;
use crate::workload::{populate, Check, Workload};
use crate::workloads::{classify, ok_or_err};

/// Accounts when `--scale` is not given.
pub const ACCOUNTS_DEFAULT: u64 = 100_000;
/// Every account's balance after population.
pub const OPENING_BALANCE: i64 = 1_000;
/// Largest amount one transfer moves (amounts are uniform from 1).
pub const AMOUNT_MAX: i64 = 100;

pub struct Bank {
    accounts: u64,
    /// The total of all balances after setup: no run may change it.
    total: AtomicI64,
}

impl Bank {
    pub fn new(scale: Option<u64>) -> Bank {
        Bank { accounts: scale.unwrap_or(ACCOUNTS_DEFAULT).max(2), total: AtomicI64::new(0) }
    }

    /// Two different accounts and an amount.
    fn next_transfer(&self, rng: &mut Rng) -> (i64, i64, i64) {
        let last = self.accounts as i64 - 1;
        let from = rng.range(0, last);
        let mut to = rng.range(0, last - 1);
        if to >= from {
            to += 1;
        }
        (from, to, rng.range(1, AMOUNT_MAX))
    }
}

impl Workload for Bank {
    async fn setup(&self, conn: &Conn) -> Result<(), Error> {
        apps::ensure_loaded(conn, &apps::BANK, "account").await?;
        let have = conn.scalar("SELECT COUNT(*) FROM account").await?;
        if have != self.accounts as i64 {
            // Another scale's accounts: start again from opening balances.
            if have > 0 {
                conn.adhoc("DELETE FROM account").await?;
            }
            let conn2 = conn.clone();
            populate("bank accounts", self.accounts, move |i| {
                let conn = conn2.clone();
                async move {
                    let a = conn.call("ACCOUNT.insert", vec![Value::Int(i as i64), Value::Int(OPENING_BALANCE)]).await?;
                    ok_or_err(&a).map_err(|e| e.context(format!("opening account {i}")))
                }
            })
            .await?;
        }
        // A database kept from an earlier run keeps that run's balances: the total is
        // what must not change.
        self.total.store(conn.scalar("SELECT SUM(balance) FROM account").await?, Ordering::Relaxed);
        Ok(())
    }

    fn one<'a>(&'a self, conn: &'a Conn, rng: &'a mut Rng) -> impl std::future::Future<Output = (&'static str, Done)> + Send + 'a {
        let (from, to, amount) = self.next_transfer(rng);
        async move {
            let r = conn.call("Transfer", vec![Value::Int(from), Value::Int(to), Value::Int(amount)]).await;
            let done = classify(r, |a| match a.int(0, 0, 0) {
                Some(0) => Done::ok("moved"),
                Some(1) => Done::ok("insufficient funds"),
                other => Done::error(format!("Transfer returned {other:?}")),
            });
            ("TRANSFER", done)
        }
    }

    async fn check(&self, conn: &Conn) -> Check {
        let mut c = Check::new();
        let total = self.total.load(Ordering::Relaxed);
        let queries = [
            ("SELECT SUM(balance) FROM account", "total of all balances"),
            ("SELECT COUNT(*) FROM account WHERE balance < 0", "accounts below zero"),
            ("SELECT COUNT(*) FROM account", "accounts"),
        ];
        let mut found = Vec::new();
        for (sql, what) in queries {
            match conn.scalar(sql).await {
                Ok(n) => found.push(n),
                Err(e) => return Check::failed(format!("reading the {what}: {}", e.message)),
            }
        }
        c.expect(found[0] == total, format!("total of all balances {} = {total} before the run", found[0]));
        c.expect(found[1] == 0, format!("{} accounts below zero", found[1]));
        c.expect(found[2] == self.accounts as i64, format!("{} accounts, {} opened", found[2], self.accounts));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_joins_two_different_accounts_within_the_scale() {
        let bank = Bank::new(Some(3));
        let mut rng = Rng::new(7);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let (from, to, amount) = bank.next_transfer(&mut rng);
            assert_ne!(from, to);
            assert!((0..3).contains(&from) && (0..3).contains(&to), "{from} {to}");
            assert!((1..=AMOUNT_MAX).contains(&amount));
            seen.insert((from, to));
        }
        assert_eq!(seen.len(), 6, "every ordered pair of the three accounts comes up");
    }
}
