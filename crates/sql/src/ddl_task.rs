//! VoltDB's scheduled tasks: `CREATE TASK name ON SCHEDULE {EVERY n unit | DELAY n unit |
//! CRON 'expr'} PROCEDURE p [WITH (args)] [RUN ON DATABASE | PARTITIONS] [ON ERROR LOG |
//! IGNORE | STOP] [ENABLE | DISABLE]`, `ALTER TASK name ENABLE | DISABLE`, `DROP TASK name
//! [IF EXISTS]`.
//!
//! `CREATE TASK name FROM CLASS a.b.Name [WITH (args)] … DISABLE` names a Java scheduler
//! class (it chooses the times and the procedure). Lockstep runs no Java, so such a task is
//! recorded only when created DISABLE (as VoltDB's charging demo creates its PurgeWrangler),
//! can be dropped, and cannot be enabled.

use lockstep_core::cron::Cron;
use lockstep_core::{Catalog, Error, Result, TaskDef, TaskOnError, TaskRunOn, TaskSchedule, Value};

use crate::ddl_parse::Cursor;
use crate::lex::TokKind;

/// Arguments a task may pass to its procedure.
pub const TASK_ARGS_MAX: usize = 64;
/// Longest interval of EVERY and DELAY: a year, in milliseconds.
pub const TASK_INTERVAL_MAX_MS: i64 = 366 * 86_400_000;

pub fn create_task(catalog: &mut Catalog, c: &mut Cursor) -> Result<String> {
    let name = c.ident("a task name")?;
    if catalog.task(&name).is_some() {
        return Err(Error::sql(format!("task {name} already exists: drop it first (DROP TASK {name})")));
    }
    let (schedule, procedure) = if c.eat_word("FROM") {
        c.expect_word("CLASS")?;
        (TaskSchedule::FromClass(c.dotted("a scheduler class name")?), String::new())
    } else {
        c.expect_word("ON")?;
        c.expect_word("SCHEDULE")?;
        let schedule = schedule(c)?;
        c.expect_word("PROCEDURE")?;
        (schedule, procedure_name(c)?)
    };
    let mut def = TaskDef {
        name: name.clone(),
        schedule,
        procedure,
        args: Vec::new(),
        run_on: TaskRunOn::Database,
        on_error: TaskOnError::Log,
        enabled: true,
    };
    if c.eat_word("WITH") {
        def.args = args(c)?;
    }
    loop {
        if c.eat_word("RUN") {
            c.expect_word("ON")?;
            def.run_on = match c.ident("DATABASE or PARTITIONS")?.as_str() {
                "DATABASE" => TaskRunOn::Database,
                "PARTITIONS" => TaskRunOn::Partitions,
                other => return Err(Error::sql(format!("RUN ON {other} is not supported: use RUN ON DATABASE or RUN ON PARTITIONS"))),
            };
        } else if c.eat_word("ON") {
            c.expect_word("ERROR")?;
            def.on_error = match c.ident("LOG, IGNORE or STOP")?.as_str() {
                "LOG" => TaskOnError::Log,
                "IGNORE" => TaskOnError::Ignore,
                "STOP" => TaskOnError::Stop,
                other => return Err(Error::sql(format!("ON ERROR {other} is not supported: use LOG, IGNORE or STOP"))),
            };
        } else if c.eat_word("ENABLE") {
            def.enabled = true;
        } else if c.eat_word("DISABLE") {
            def.enabled = false;
        } else if c.is_word("AS") {
            return Err(Error::sql("CREATE TASK … AS USER is not supported: the task runs as the server"));
        } else {
            break;
        }
    }
    c.expect_end()?;
    if let TaskSchedule::FromClass(class) = &def.schedule {
        if def.enabled {
            return Err(class_cannot_run(&name, class));
        }
    } else {
        check_procedure(catalog, &def.procedure)?;
    }
    catalog.put_task(def);
    Ok(format!("task {name} created"))
}

/// Why a task of a Java scheduler class cannot be enabled, and what to do instead.
fn class_cannot_run(name: &str, class: &str) -> Error {
    Error::sql(format!(
        "task {name} runs Java scheduler class {class}, and Lockstep cannot run Java classes: it can only be created DISABLE \
         (and dropped). To run a procedure on a schedule, use CREATE TASK {name} ON SCHEDULE {{EVERY | DELAY | CRON}} … PROCEDURE …"
    ))
}

fn schedule(c: &mut Cursor) -> Result<TaskSchedule> {
    if c.eat_word("CRON") {
        let text = c.string("a cron expression in quotes")?;
        Cron::parse(&text).map_err(Error::sql)?;
        return Ok(TaskSchedule::Cron(text));
    }
    let every = if c.eat_word("EVERY") {
        true
    } else if c.eat_word("DELAY") {
        false
    } else {
        return Err(c.error("expected EVERY, DELAY or CRON after ON SCHEDULE"));
    };
    let n = c.integer("an interval (a whole number)")?;
    let unit_ms = match c.ident("a unit (MILLISECONDS, SECONDS, MINUTES, HOURS or DAYS)")?.as_str() {
        "MILLISECOND" | "MILLISECONDS" => 1,
        "SECOND" | "SECONDS" => 1000,
        "MINUTE" | "MINUTES" => 60_000,
        "HOUR" | "HOURS" => 3_600_000,
        "DAY" | "DAYS" => 86_400_000,
        other => return Err(Error::sql(format!("{other} is not a unit: use MILLISECONDS, SECONDS, MINUTES, HOURS or DAYS"))),
    };
    let millis = n
        .checked_mul(unit_ms)
        .filter(|ms| (1..=TASK_INTERVAL_MAX_MS).contains(ms))
        .ok_or_else(|| Error::sql(format!("a task's interval must be from 1 millisecond to {} days", TASK_INTERVAL_MAX_MS / 86_400_000)))?;
    Ok(if every { TaskSchedule::Every { millis } } else { TaskSchedule::Delay { millis } })
}

/// A procedure name: `Name`, `TABLE.insert` or `@System`.
fn procedure_name(c: &mut Cursor) -> Result<String> {
    if c.eat_punct("@") {
        return Ok(format!("@{}", c.name_as_written("a system procedure name")?));
    }
    c.dotted("a procedure name")
}

/// The literal arguments of `WITH (…)`: numbers, strings, NULL.
fn args(c: &mut Cursor) -> Result<Vec<Value>> {
    c.expect_punct("(")?;
    let mut out = Vec::new();
    if c.eat_punct(")") {
        return Ok(out);
    }
    loop {
        let negative = c.eat_punct("-");
        let value = if c.eat_word("NULL") {
            Value::Null
        } else if let Ok(s) = c.string("") {
            Value::from(s.as_str())
        } else {
            let text = c
                .next()
                .filter(|t| t.kind == TokKind::Number)
                .map(|t| t.text)
                .ok_or_else(|| c.error("expected a number, a string or NULL in WITH (…)"))?;
            let text = if negative { format!("-{text}") } else { text };
            match text.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Float(text.parse::<f64>().map_err(|_| Error::sql(format!("{text} is not a number")))?),
            }
        };
        out.push(value);
        if out.len() > TASK_ARGS_MAX {
            return Err(Error::sql(format!("a task passes at most {TASK_ARGS_MAX} arguments")));
        }
        if c.eat_punct(")") {
            return Ok(out);
        }
        c.expect_punct(",")?;
    }
}

/// The procedure must exist when the task is created: a user procedure, a table's default
/// procedure, or a system procedure (which the server checks when it runs).
fn check_procedure(catalog: &Catalog, name: &str) -> Result<()> {
    if name.starts_with('@') || catalog.procedure(name).is_some() {
        return Ok(());
    }
    if let Some((table, _)) = name.rsplit_once('.') {
        if catalog.table(table).is_some() {
            return Ok(());
        }
    }
    Err(Error::sql(format!("the task's procedure {name} does not exist: create it first")))
}

/// `ALTER TASK name ENABLE | DISABLE`.
pub fn alter_task(catalog: &mut Catalog, c: &mut Cursor) -> Result<String> {
    let name = c.ident("a task name")?;
    let enabled = if c.eat_word("ENABLE") {
        true
    } else if c.eat_word("DISABLE") {
        false
    } else {
        return Err(c.error("ALTER TASK supports ENABLE and DISABLE"));
    };
    c.expect_end()?;
    let mut def = (**catalog.task(&name).ok_or_else(|| Error::sql(format!("task {name} does not exist")))?).clone();
    if let (true, TaskSchedule::FromClass(class)) = (enabled, &def.schedule) {
        return Err(class_cannot_run(&def.name, class));
    }
    def.enabled = enabled;
    let name = def.name.clone();
    catalog.put_task(def);
    Ok(format!("task {name} {}", if enabled { "enabled" } else { "disabled" }))
}

/// `DROP TASK name [IF EXISTS]`.
pub fn drop_task(catalog: &mut Catalog, c: &mut Cursor) -> Result<String> {
    let mut if_exists = false;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    let name = c.ident("a task name")?;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    c.expect_end()?;
    match catalog.drop_task(&name) {
        Some(def) => Ok(format!("task {} dropped", def.name)),
        None if if_exists => Ok(format!("task {name} does not exist; nothing dropped")),
        None => Err(Error::sql(format!("task {name} does not exist"))),
    }
}
