use proptest::prelude::*;

use super::*;
use crate::core::schema::Column;

fn schema() -> Schema {
    let col = |name: &str, ty: &str| Column {
        name: name.into(),
        ty: ty.parse().unwrap(),
    };
    Schema {
        columns: vec![
            col("id", "int"),
            col("amount", "decimal(10,2)"),
            col("name", "string"),
            col("ts", "timestamp"),
            col("day", "date"),
            col("ok", "bool"),
        ],
    }
}

fn batch(rows: &[[Option<&str>; 6]]) -> RecordBatch {
    let mut b = RecordBatch::new(6);
    for (i, row) in rows.iter().enumerate() {
        for cell in row {
            b.push_cell(cell.map(str::as_bytes));
        }
        b.end_row(0, i as u64 + 2);
    }
    b
}

fn eval_on(text: &str, row: [Option<&str>; 6]) -> Value<'static> {
    let e = Expr::compile(text, &schema()).unwrap_or_else(|err| panic!("{}", err.render(text)));
    let b = batch(&[row]);
    match e.eval(&b, 0).unwrap() {
        Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
        Value::Null => Value::Null,
        Value::Bool(x) => Value::Bool(x),
        Value::Int(x) => Value::Int(x),
        Value::Float(x) => Value::Float(x),
        Value::Date(x) => Value::Date(x),
        Value::Ts(x) => Value::Ts(x),
    }
}

const ROW: [Option<&str>; 6] = [
    Some("7"),
    Some("12.50"),
    Some("  Zoë "),
    Some("2026-11-28T23:30:00Z"),
    Some("2026-11-28"),
    Some("true"),
];

#[test]
fn functions_and_operators() {
    let text = |t: &str| eval_on(t, ROW).to_text();
    assert_eq!(text("date(ts)").as_deref(), Some("2026-11-28"));
    assert_eq!(
        text("year(ts) * 100 + month(ts)").as_deref(),
        Some("202611")
    );
    assert_eq!(text("hour(ts)").as_deref(), Some("23"));
    assert_eq!(text("day(day)").as_deref(), Some("28"));
    assert_eq!(text("upper(trim(name))").as_deref(), Some("ZOË"));
    assert_eq!(text("lower(name)").as_deref(), Some("  zoë "));
    assert_eq!(text("length(trim(name))").as_deref(), Some("3"));
    assert_eq!(text("'order-' || id").as_deref(), Some("order-7"));
    assert_eq!(text("concat(id, NULL, '/', ok)").as_deref(), Some("7/true"));
    assert_eq!(text("coalesce(NULL, id, 3)").as_deref(), Some("7"));
    assert_eq!(text("amount * 2").as_deref(), Some("25"));
    assert_eq!(text("id / 2").as_deref(), Some("3"));
    assert_eq!(text("id % 4").as_deref(), Some("3"));
    assert_eq!(text("-id").as_deref(), Some("-7"));
}

#[test]
fn comparisons_logic_and_dates() {
    let truth = |t: &str| eval_on(t, ROW);
    assert_eq!(truth("amount > 10 AND name != 'x'"), Value::Bool(true));
    assert_eq!(truth("id IN (1, 7)"), Value::Bool(true));
    assert_eq!(truth("id NOT IN (1, 2)"), Value::Bool(true));
    assert_eq!(
        truth("day >= '2026-11-01' AND day < '2026-12-01'"),
        Value::Bool(true)
    );
    assert_eq!(truth("ts < '2026-11-28T23:00:00Z'"), Value::Bool(false));
    assert_eq!(truth("ok AND NOT (id = 3)"), Value::Bool(true));
    assert_eq!(truth("name IS NOT NULL"), Value::Bool(true));
}

#[test]
fn nulls_follow_sql() {
    let nulls = [None, None, None, None, None, None];
    assert_eq!(eval_on("id > 3", nulls), Value::Null);
    assert_eq!(eval_on("id > 3 OR TRUE", nulls), Value::Bool(true));
    assert_eq!(eval_on("id > 3 AND FALSE", nulls), Value::Bool(false));
    assert_eq!(eval_on("id IS NULL", nulls), Value::Bool(true));
    assert_eq!(eval_on("id IN (1, 2)", nulls), Value::Null);
    assert_eq!(eval_on("name || 'x'", nulls), Value::Null);
    assert_eq!(eval_on("date(ts)", nulls), Value::Null);
}

#[test]
fn runtime_errors_are_reported_not_panicked() {
    let e = Expr::compile("id / (id - 7)", &schema()).unwrap();
    assert_eq!(e.eval(&batch(&[ROW]), 0).unwrap_err(), "division by zero");
    let e = Expr::compile("id * 9223372036854775807", &schema()).unwrap();
    assert_eq!(e.eval(&batch(&[ROW]), 0).unwrap_err(), "integer overflow");
}

#[test]
fn type_errors_point_at_the_mistake() {
    let err = |t: &str| Expr::compile(t, &schema()).unwrap_err();
    assert_eq!(err("name > 3").col, 6);
    assert!(err("name > 3")
        .message
        .contains("cannot compare string and int"));
    assert_eq!(err("id + nme").col, 6);
    assert!(err("id + nme").message.contains("no column \"nme\""));
    assert_eq!(err("year(name)").col, 6);
    assert_eq!(err("frobnicate(id)").col, 1);
    assert_eq!(err("day > '2026-13-01'").col, 7);
    assert_eq!(err("NOT id").col, 1);
    assert_eq!(err("id AND ok").col, 1);
    let rendered = err("id + nme").render("id + nme");
    assert!(rendered.ends_with("  id + nme\n       ^"), "{rendered}");
}

proptest! {
    #[test]
    fn the_parser_never_panics(text in "\\PC{0,40}") {
        let _ = Expr::compile(&text, &schema());
    }

    #[test]
    fn tokens_from_the_grammar_never_panic(parts in proptest::collection::vec(
        prop_oneof![
            Just("id"), Just("amount"), Just("name"), Just("("), Just(")"), Just(","), Just("+"),
            Just("||"), Just("AND"), Just("NOT"), Just("IS"), Just("NULL"), Just("IN"), Just("="),
            Just("'x'"), Just("3"), Just("2.5"), Just("coalesce"), Just("date"), Just("-"),
        ], 0..12)) {
        let text = parts.join(" ");
        if let Ok(e) = Expr::compile(&text, &schema()) {
            let _ = e.eval(&batch(&[ROW]), 0);
        }
    }

    /// `eval_text` (with its shortcut for `date(ts)`) writes what `eval` then
    /// `write_text` would, for canonical timestamps, other spellings, and nulls.
    #[test]
    fn text_of_a_date_is_the_same_with_or_without_the_shortcut(
        secs in -62_135_596_800i64..253_402_207_200,
        other in prop_oneof![
            Just(None), Just(Some("2026-11-28T23:30:00+01:00")), Just(Some("2026-11-28 23:30:00Z")),
            Just(Some("2026-02-30T00:00:00Z")), Just(Some("9999-12-31T00:00:00Z")),
            Just(Some("2026-11-28T23:30:00.25Z")), Just(Some("not a time")),
        ],
    ) {
        let canonical = Timestamp::from_second(secs).unwrap().to_string();
        for value in [Some(canonical.as_str()), other] {
            let b = batch(&[[None, None, None, value, None, None]]);
            for text in ["date(ts)", "date(day)", "year(ts)", "ts"] {
                let e = Expr::compile(text, &schema()).unwrap();
                let mut fast = Vec::new();
                let got = e.eval_text(&b, 0, &mut fast).map(|present| (present, fast));
                let want = e.eval(&b, 0).map(|v| {
                    let mut slow = Vec::new();
                    (v.write_text(&mut slow), slow)
                });
                prop_assert_eq!(got, want, "{} on {:?}", text, value);
            }
        }
    }

    /// An integer column's text is read without `str::parse` where it can be, and then
    /// to the same value; the text of an integer result is what `Display` writes.
    #[test]
    fn integers_read_and_written_as_rust_reads_and_writes_them(
        n in prop_oneof![any::<i64>(), -10_000i64..10_000],
        text in "[-+]?[0-9]{0,20}|[-+0-9a ]{0,6}",
    ) {
        let written = n.to_string();
        let digits = written.trim_start_matches('-').len();
        prop_assert_eq!(super::eval::plain_int(written.as_bytes()), (digits <= 18).then_some(n));
        if let Some(read) = super::eval::plain_int(text.as_bytes()) {
            prop_assert_eq!(Ok(read), text.parse::<i64>(), "{:?}", text);
        }
        for text in [written.as_str(), text.as_str()] {
            let e = Expr::compile("id", &schema()).unwrap();
            let b = batch(&[[Some(text), None, None, None, None, None]]);
            let got = e.eval(&b, 0).ok();
            prop_assert_eq!(got, text.parse::<i64>().ok().map(Value::Int), "{:?}", text);
        }
        let mut out = Vec::new();
        prop_assert!(Value::Int(n).write_text(&mut out));
        prop_assert_eq!(out, written.into_bytes());
    }

    #[test]
    fn integer_arithmetic_matches_checked_rust(a in -1000i64..1000, b in -1000i64..1000) {
        let b_row = batch(&[[Some(&a.to_string()), None, None, None, None, None]]);
        for (op, want) in [("+", a.checked_add(b)), ("-", a.checked_sub(b)), ("*", a.checked_mul(b))] {
            let e = Expr::compile(&format!("id {op} ({b})"), &schema()).unwrap();
            prop_assert_eq!(e.eval(&b_row, 0).unwrap(), Value::Int(want.unwrap()));
        }
        let e = Expr::compile(&format!("id < ({b})"), &schema()).unwrap();
        prop_assert_eq!(e.eval(&b_row, 0).unwrap(), Value::Bool(a < b));
    }
}
