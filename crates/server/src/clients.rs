//! The live connections and their in-flight windows, for `@Statistics LIVECLIENTS`
//! (answered by the front end: the engine does not know connections).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use lockstep_core::{DataType, ResultTable, Value};
use lockstep_engine::sysprocs;
use tokio::sync::Semaphore;

/// One connection's window: permits taken are calls / KiB in flight.
pub struct Window {
    pub peer: SocketAddr,
    pub calls: Arc<Semaphore>,
    pub calls_max: usize,
    pub kib: Arc<Semaphore>,
    pub kib_max: usize,
}

impl Window {
    fn calls_in_flight(&self) -> usize {
        self.calls_max.saturating_sub(self.calls.available_permits())
    }

    fn kib_in_flight(&self) -> usize {
        self.kib_max.saturating_sub(self.kib.available_permits())
    }
}

#[derive(Default)]
pub struct LiveClients {
    windows: Mutex<BTreeMap<i64, Window>>,
}

impl LiveClients {
    pub fn add(&self, id: i64, w: Window) {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).insert(id, w);
    }

    pub fn remove(&self, id: i64) {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// VoltDB's LIVECLIENTS layout: one row per connection.
    pub fn table(&self) -> ResultTable {
        use DataType::{BigInt as B, Integer as I, TinyInt as T, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TIMESTAMP", B),
            ("HOST_ID", I),
            ("HOSTNAME", V),
            ("CONNECTION_ID", B),
            ("CLIENT_HOSTNAME", V),
            ("ADMIN", T),
            ("OUTSTANDING_REQUEST_BYTES", B),
            ("OUTSTANDING_RESPONSE_MESSAGES", B),
            ("OUTSTANDING_TRANSACTIONS", B),
        ]);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let host = sysprocs::hostname();
        for (id, w) in self.windows.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.push(vec![
                Value::Int(now),
                Value::Int(sysprocs::HOST_ID as i64),
                Value::from(host.as_str()),
                Value::Int(*id),
                Value::Str(w.peer.to_string().into()),
                Value::Int(0),
                Value::Int(w.kib_in_flight() as i64 * 1024),
                Value::Int(0),
                Value::Int(w.calls_in_flight() as i64),
            ]);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_what_each_window_holds() {
        let live = LiveClients::default();
        let calls = Arc::new(Semaphore::new(10));
        let kib = Arc::new(Semaphore::new(100));
        let _held = (calls.clone().try_acquire_many_owned(3).unwrap(), kib.clone().try_acquire_many_owned(5).unwrap());
        live.add(7, Window { peer: "127.0.0.1:9".parse().unwrap(), calls, calls_max: 10, kib, kib_max: 100 });
        let t = live.table();
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0][3], Value::Int(7));
        assert_eq!(t.rows[0][6], Value::Int(5 * 1024));
        assert_eq!(t.rows[0][8], Value::Int(3));
        live.remove(7);
        assert!(live.table().rows.is_empty());
    }
}
