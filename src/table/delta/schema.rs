//! The Delta schema of a load: each column's type as Delta names it, and the check that
//! a table's schema and partition columns are the load's (the table contract of a Delta
//! table lives in its log, where every Delta reader finds it).

use anyhow::Result;
use deltalake::kernel::{DataType, StructField};

use crate::core::schema::{ColumnType, Schema};

/// The load's columns (partition columns included, in order) as Delta fields. Every
/// field is nullable: an empty CSV field or a JSON null is a null.
pub(crate) fn fields(schema: &Schema) -> Result<Vec<StructField>> {
    schema
        .columns
        .iter()
        .map(|c| Ok(StructField::new(c.name.clone(), data_type(c.ty)?, true)))
        .collect()
}

/// The Delta type of a column: the type its Parquet data has (`sink/parquet.rs`).
fn data_type(ty: ColumnType) -> Result<DataType> {
    Ok(match ty {
        ColumnType::String | ColumnType::Json => DataType::STRING,
        ColumnType::Int => DataType::LONG,
        ColumnType::Float => DataType::DOUBLE,
        ColumnType::Decimal { precision, scale } => DataType::decimal(precision, scale)
            .map_err(|e| anyhow::anyhow!("decimal({precision},{scale}) in a Delta table: {e}"))?,
        ColumnType::Bool => DataType::BOOLEAN,
        ColumnType::Date => DataType::DATE,
        ColumnType::Timestamp => DataType::TIMESTAMP,
    })
}

/// Fails, showing both sides, unless the table's fields and partition columns are the
/// load's: same names, types and order.
pub(crate) fn check(
    table: &[StructField],
    table_partitions: &[String],
    load: &[StructField],
    load_partitions: &[String],
) -> Result<(), String> {
    let same_fields = table.len() == load.len()
        && table
            .iter()
            .zip(load)
            .all(|(t, l)| t.name() == l.name() && t.data_type() == l.data_type());
    if same_fields && table_partitions == load_partitions {
        return Ok(());
    }
    Err(format!(
        "the Delta table's schema differs from this load's\n  table: {}\n  load:  {}\nload \
         the data into another table, or cast and rename its columns to the table's (a load \
         with --evolve add-columns may add columns after the table's)",
        describe(table, table_partitions),
        describe(load, load_partitions)
    ))
}

/// The fields a load adds to the table's (`--evolve add-columns`): when the load's
/// fields are the table's, in order with the same types, followed by new ones, and the
/// partitioning is the same. `None` for any other difference, and for none.
pub(crate) fn added(
    table: &[StructField],
    table_partitions: &[String],
    load: &[StructField],
    load_partitions: &[String],
) -> Option<Vec<StructField>> {
    let extends = table_partitions == load_partitions
        && load.len() > table.len()
        && check(
            table,
            table_partitions,
            &load[..table.len()],
            load_partitions,
        )
        .is_ok();
    extends.then(|| load[table.len()..].to_vec())
}

fn describe(fields: &[StructField], partitions: &[String]) -> String {
    format!(
        "partitioned by [{}], columns: {}",
        partitions.join(", "),
        fields
            .iter()
            .map(|f| format!("{} {}", f.name(), type_name(f.data_type())))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A Delta type as the Delta schema string writes it: `long`, `decimal(9,2)`.
fn type_name(ty: &DataType) -> String {
    match serde_json::to_value(ty) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::Column;

    fn schema(cols: &[(&str, ColumnType)]) -> Schema {
        Schema {
            columns: cols
                .iter()
                .map(|(name, ty)| Column {
                    name: name.to_string(),
                    ty: *ty,
                })
                .collect(),
        }
    }

    #[test]
    fn every_column_type_has_its_delta_type() {
        let s = schema(&[
            ("s", ColumnType::String),
            ("i", ColumnType::Int),
            ("f", ColumnType::Float),
            (
                "d",
                ColumnType::Decimal {
                    precision: 9,
                    scale: 2,
                },
            ),
            ("b", ColumnType::Bool),
            ("day", ColumnType::Date),
            ("at", ColumnType::Timestamp),
            ("j", ColumnType::Json),
        ]);
        let names: Vec<String> = fields(&s)
            .unwrap()
            .iter()
            .map(|f| type_name(f.data_type()))
            .collect();
        assert_eq!(
            names,
            [
                "string",
                "long",
                "double",
                "decimal(9,2)",
                "boolean",
                "date",
                "timestamp",
                "string"
            ]
        );
    }

    #[test]
    fn a_different_type_order_or_partitioning_is_refused_with_both_sides() {
        let load = fields(&schema(&[
            ("id", ColumnType::Int),
            ("c", ColumnType::String),
        ]))
        .unwrap();
        let p = vec!["c".to_string()];
        assert!(check(&load, &p, &load, &p).is_ok());
        let other = fields(&schema(&[
            ("id", ColumnType::String),
            ("c", ColumnType::String),
        ]))
        .unwrap();
        let e = check(&other, &p, &load, &p).unwrap_err();
        assert!(
            e.contains("table: partitioned by [c], columns: id string, c string"),
            "{e}"
        );
        assert!(
            e.contains("load:  partitioned by [c], columns: id long, c string"),
            "{e}"
        );
        let swapped = fields(&schema(&[
            ("c", ColumnType::String),
            ("id", ColumnType::Int),
        ]))
        .unwrap();
        assert!(check(&swapped, &p, &load, &p).is_err());
        assert!(check(&load, &[], &load, &p).is_err());
        assert!(check(&load[..1], &p, &load, &p).is_err());
    }

    #[test]
    fn only_columns_after_the_tables_are_added() {
        let table = fields(&schema(&[
            ("id", ColumnType::Int),
            ("c", ColumnType::String),
        ]))
        .unwrap();
        let p = vec!["c".to_string()];
        let wider = fields(&schema(&[
            ("id", ColumnType::Int),
            ("c", ColumnType::String),
            ("note", ColumnType::String),
            ("qty", ColumnType::Int),
        ]))
        .unwrap();
        let names = |f: Option<Vec<StructField>>| {
            f.map(|f| f.iter().map(|f| f.name().to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            names(added(&table, &p, &wider, &p)),
            Some(vec!["note".to_string(), "qty".to_string()])
        );
        assert_eq!(names(added(&table, &p, &table, &p)), None, "nothing to add");
        assert_eq!(
            names(added(&table, &p, &wider, &[])),
            None,
            "other partitioning"
        );
        assert_eq!(names(added(&wider, &p, &table, &p)), None, "fewer columns");
        let retyped = fields(&schema(&[
            ("id", ColumnType::String),
            ("c", ColumnType::String),
            ("note", ColumnType::String),
        ]))
        .unwrap();
        assert_eq!(
            names(added(&table, &p, &retyped, &p)),
            None,
            "a changed type"
        );
        let inserted = fields(&schema(&[
            ("id", ColumnType::Int),
            ("note", ColumnType::String),
            ("c", ColumnType::String),
        ]))
        .unwrap();
        assert_eq!(names(added(&table, &p, &inserted, &p)), None, "not after");
    }
}
