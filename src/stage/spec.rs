//! Stage specifications: what a job file's `[[stage]]` tables and the CLI's stage flags
//! say, journaled with the run so that `--recover` builds the very same pipeline.

use anyhow::{anyhow, Result};

use super::cast::Cast;
use super::clean::{NullMarkers, Trim};
use super::context::RunContext;
use super::dedupe::Dedupe;
use super::expr::{Derive, Filter};
use super::reshape::{Append, Reshape};
use super::Stage;
use crate::core::schema::Schema;
use crate::core::spec::{DedupeScope, StageSpec};

/// Builds the stages in order, each against the schema the previous one produces;
/// returns them with the final schema. Errors name the stage.
pub(crate) fn build(
    specs: &[StageSpec],
    input: &Schema,
    ctx: &RunContext,
) -> Result<(Vec<Box<dyn Stage>>, Schema)> {
    let mut schema = input.clone();
    let mut stages: Vec<Box<dyn Stage>> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let named = |e: String| anyhow!("stage {} ({}): {e}", i + 1, spec.kind());
        let (stage, next): (Box<dyn Stage>, Schema) = match spec {
            StageSpec::Select { columns } => {
                boxed(Reshape::select(&schema, columns).map_err(named)?)
            }
            StageSpec::Drop { columns } => boxed(Reshape::drop(&schema, columns).map_err(named)?),
            StageSpec::Rename { columns } => {
                boxed(Reshape::rename(&schema, columns).map_err(named)?)
            }
            StageSpec::Trim { columns } => boxed(Trim::new(&schema, columns).map_err(named)?),
            StageSpec::NullMarkers { markers, columns } => {
                boxed(NullMarkers::new(&schema, markers, columns).map_err(named)?)
            }
            StageSpec::Cast {
                columns,
                format,
                timezone,
            } => boxed(
                Cast::new(&schema, columns, format.as_deref(), timezone.as_deref())
                    .map_err(named)?,
            ),
            StageSpec::Derive { column, expr } => {
                boxed(Derive::new(&schema, column, expr).map_err(named)?)
            }
            StageSpec::Filter { expr } => boxed(Filter::new(&schema, expr).map_err(named)?),
            StageSpec::Constant { column, value } => {
                boxed(Append::constant(&schema, column, value).map_err(named)?)
            }
            StageSpec::Metadata { column, field } => {
                boxed(Append::metadata(&schema, column, *field, ctx).map_err(named)?)
            }
            StageSpec::Dedupe { key, scope, .. } => {
                let stage = Dedupe::new(key, &schema)
                    .map_err(|e| named(e.to_string()))?
                    .expecting(ctx.input_bytes)
                    .keeping_final_state(*scope == DedupeScope::Job);
                (Box::new(stage), schema.clone())
            }
        };
        stages.push(stage);
        schema = next;
    }
    Ok((stages, schema))
}

fn boxed<S: Stage + 'static>((stage, schema): (S, Schema)) -> (Box<dyn Stage>, Schema) {
    (Box::new(stage), schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_checks_each_stage_against_the_schema_before_it() {
        let schema = Schema::strings(&["a".into(), "b".into()]);
        let specs = vec![
            StageSpec::Rename {
                columns: [("a".to_string(), "x".to_string())].into(),
            },
            StageSpec::Derive {
                column: "y".into(),
                expr: "x || b".into(),
            },
            StageSpec::Select {
                columns: vec!["y".into(), "x".into()],
            },
        ];
        let (stages, out) = build(&specs, &schema, &RunContext::default()).unwrap();
        assert_eq!(stages.len(), 3);
        assert_eq!(out.names(), vec!["y", "x"]);
        let bad = vec![
            StageSpec::Select {
                columns: vec!["a".into()],
            },
            StageSpec::Filter {
                expr: "b = 'x'".into(),
            },
        ];
        let err = build(&bad, &schema, &RunContext::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("stage 2 (filter): "), "{err}");
        assert!(err.contains("no column \"b\""), "{err}");
    }
}
