//! Votes once through the Lockstep Rust client, then prints the results (apps/voter).
use lockstep_client::{status, Client, ClientConfig, Response};
use lockstep_core::Value;

/// The server's message when a call failed, the response otherwise.
fn succeeded(r: Response) -> Result<Response, String> {
    match r.status {
        status::SUCCESS => Ok(r),
        _ => Err(r.status_string.unwrap_or_else(|| format!("status {}", r.status))),
    }
}

pub async fn vote_and_print(server: &str) -> Result<(), Box<dyn std::error::Error>> {
    // With --security on, set ClientConfig's username and password.
    let client = Client::connect(server, ClientConfig::default()).await?;
    // Vote(phone_number, contestant_number, max_votes) returns 0 when the vote counts.
    let args = vec![Value::from(5_550_001_234_i64), Value::from(2_i64), Value::from(2_i64)];
    let vote = succeeded(client.call("Vote", args).await?)?;
    if let Some(code) = vote.tables.first().and_then(|t| t.rows.first()).and_then(|row| row.first()) {
        println!("Vote returned {code}");
    }
    // Results: contestant_name, contestant_number, total_votes; most votes first.
    let results = succeeded(client.call("Results", vec![]).await?)?;
    for row in results.tables.iter().flat_map(|t| &t.rows) {
        if let [name, _number, votes] = row.as_slice() {
            println!("{name} has {votes} votes");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    vote_and_print("127.0.0.1:21212").await
}
