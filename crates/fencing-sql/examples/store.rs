//! A fenced key-value table: the holder's writes go through, a zombie's are
//! refused.
//!
//! ```sh
//! DATABASE_URL=postgres://fencing:fencing@127.0.0.1:5432/fencing cargo run -p fencing-sql --example store
//! cargo run -p fencing-sql --example store -- mysql://fencing:fencing@127.0.0.1:3306/fencing
//! cargo run -p fencing-sql --example store -- sqlite://example.sqlite
//! ```

use fencing_core::{Error, FencedStore, FencingToken};
use fencing_sql::SqlConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // A URL argument, else FENCING_SQL_URL or DATABASE_URL.
    let url = std::env::args().nth(1);
    let config = url.map_or_else(SqlConfig::from_env, |url| SqlConfig::from_url(&url))?;
    let store = config.connect_store().await?;
    let key = format!("examples/store/{}", std::process::id());

    store
        .put(
            &key,
            "first write by holder 33".into(),
            FencingToken::new(33),
        )
        .await?;
    store
        .put(
            &key,
            "second write by holder 33".into(),
            FencingToken::new(33),
        )
        .await?; // equal: accepted
    store
        .put(&key, "holder 34 took over".into(), FencingToken::new(34))
        .await?;
    match store
        .put(&key, "zombie 33 woke up".into(), FencingToken::new(33))
        .await
    {
        Err(e @ Error::StaleToken { .. }) => println!("refused as it should be: {e}"),
        other => panic!("the zombie's write went through: {other:?}"),
    }
    let record = store.get(&key).await?.expect("written");
    println!(
        "{key} = {:?} at token {}",
        String::from_utf8_lossy(&record.value),
        record.token
    );
    Ok(())
}
