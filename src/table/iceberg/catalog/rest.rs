//! An Iceberg REST catalog (`--catalog http(s)://HOST[:PORT][/PATH][?warehouse=W]`):
//! the catalog's HTTP API, as Polaris, Lakekeeper, Gravitino and SeaweedFS serve it
//! (with a bearer token or OAuth2; not yet SigV4, which AWS S3 Tables' endpoint wants).
//!
//! - A table is found with `GET …/namespaces/NS/tables/NAME` (its metadata file's
//!   location); created empty when a run begins (`POST …/namespaces/NS/tables`, the
//!   namespace made first if needed), the catalog writing its metadata file and giving
//!   its columns their ids, which the run's data files then carry.
//! - A commit is `POST …/namespaces/NS/tables/NAME` with the snapshot, the `main` branch
//!   moved to it and the job's property, on two conditions the server checks atomically:
//!   the table is still this table (`assert-table-uuid`) and `main` is still where the
//!   commit was made (`assert-ref-snapshot-id`). 409 is a lost race; any other failure,
//!   a timeout or a 5xx included, leaves the commit's fate unknown, and the caller's next
//!   look at the table decides it, as for any catalog. Nothing here retries a commit.
//! - Credentials from the environment, never printed: `ICEBERG_TOKEN` (a bearer token),
//!   or `ICEBERG_CREDENTIAL` (`CLIENT_ID:CLIENT_SECRET`, exchanged for a token by OAuth2's
//!   client-credentials grant at `ICEBERG_OAUTH2_SERVER_URI`, by default the catalog's
//!   `/v1/oauth/tokens`, with scope `ICEBERG_SCOPE`, by default `catalog`).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Catalog, Swap, TableName};
use crate::core::catalog::CatalogTable;
use crate::table::iceberg::metadata::TableMetadata;

/// Bounds on every request: a catalog that stops answering fails the run.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A REST catalog, reached with a token if the environment gives one.
pub(crate) struct RestCatalog {
    client: Client,
    /// `BASE/v1/PREFIX`: what every table path hangs off.
    root: String,
    /// The URI as messages name it (without a password, and never the token).
    shown: String,
    token: Option<String>,
}

impl RestCatalog {
    /// Reaches the catalog `target` names: its token, then its configuration (the
    /// path prefix of the warehouse the URI's `warehouse=` names).
    pub(crate) fn open(target: &CatalogTable) -> Result<RestCatalog> {
        let shown = target.catalog.clone();
        let uri = target.connect_uri();
        let (base, query) = uri.split_once('?').unwrap_or((uri, ""));
        let base = base.trim_end_matches('/').to_string();
        let warehouse = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("warehouse="))
            .map(str::to_string);
        // No retries by the client, not even of requests the server refused unread
        // (reqwest's default): whether a commit happened is decided by looking.
        let client = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .retry(reqwest::retry::never())
            .build()
            .context("cannot make an HTTP client")?;
        let token = match std::env::var("ICEBERG_TOKEN") {
            Ok(token) if !token.is_empty() => Some(token),
            _ => match std::env::var("ICEBERG_CREDENTIAL") {
                Ok(credential) if !credential.is_empty() => {
                    Some(oauth2_token(&client, &base, &credential, &shown)?)
                }
                _ => None,
            },
        };
        let mut catalog = RestCatalog {
            client,
            root: format!("{base}/v1"),
            shown,
            token,
        };
        let mut config = catalog.client.get(format!("{base}/v1/config"));
        if let Some(warehouse) = &warehouse {
            config = config.query(&[("warehouse", warehouse)]);
        }
        let config =
            catalog.json(catalog.send(config, "cannot read the catalog's configuration")?)?;
        let prefix = config["overrides"]["prefix"]
            .as_str()
            .or(config["defaults"]["prefix"].as_str());
        if let Some(prefix) = prefix {
            catalog.root = format!("{base}/v1/{}", prefix.trim_matches('/'));
        }
        Ok(catalog)
    }

    /// `request` with the token, sent; its response whatever the status, or why no
    /// response came.
    fn send(&self, request: RequestBuilder, what: &str) -> Result<Response> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        request
            .send()
            .map_err(|e| anyhow::Error::new(e.without_url()))
            .with_context(|| format!("{what}: no answer from the REST catalog {}", self.shown))
    }

    /// A successful response's JSON body; any other is an error with the server's own
    /// message.
    fn json(&self, response: Response) -> Result<Value> {
        let status = response.status();
        if !status.is_success() {
            bail!("{}", self.refusal(response));
        }
        response
            .json()
            .with_context(|| format!("the REST catalog {} answered with no JSON", self.shown))
    }

    /// What a refusing response says: its status and the catalog's error message.
    fn refusal(&self, response: Response) -> String {
        let status = response.status();
        let message = response
            .json::<Value>()
            .ok()
            .and_then(|body| body["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_default();
        let hint = if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            " (credentials: ICEBERG_TOKEN, or ICEBERG_CREDENTIAL=CLIENT_ID:SECRET)"
        } else {
            ""
        };
        format!(
            "the REST catalog {} answered {status}: {message}{hint}",
            self.shown
        )
    }

    fn table_url(&self, table: &TableName) -> String {
        format!(
            "{}/namespaces/{}/tables/{}",
            self.root,
            namespace_path(&table.namespace),
            table.name
        )
    }
}

/// A namespace as a path segment: its levels joined by the unit separator (0x1F), as the
/// REST specification has it.
fn namespace_path(namespace: &str) -> String {
    namespace.replace('.', "%1F")
}

/// A bearer token for `credential` (`CLIENT_ID:CLIENT_SECRET`) by OAuth2's
/// client-credentials grant.
fn oauth2_token(client: &Client, base: &str, credential: &str, shown: &str) -> Result<String> {
    let (id, secret) = credential
        .split_once(':')
        .context("ICEBERG_CREDENTIAL: expected CLIENT_ID:CLIENT_SECRET")?;
    let server = std::env::var("ICEBERG_OAUTH2_SERVER_URI")
        .ok()
        .filter(|uri| !uri.is_empty())
        .unwrap_or_else(|| format!("{base}/v1/oauth/tokens"));
    let scope = std::env::var("ICEBERG_SCOPE").unwrap_or_else(|_| "catalog".to_string());
    let response = client
        .post(&server)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", id),
            ("client_secret", secret),
            ("scope", &scope),
        ])
        .send()
        .map_err(|e| anyhow::Error::new(e.without_url()))
        .with_context(|| format!("cannot get a token for the REST catalog {shown}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("the REST catalog {shown}'s token endpoint refused ICEBERG_CREDENTIAL ({status})");
    }
    let body: Value = response
        .json()
        .with_context(|| format!("the token endpoint of {shown} answered with no JSON"))?;
    match body["access_token"].as_str() {
        Some(token) => Ok(token.to_string()),
        None => bail!("the token endpoint of {shown} answered with no access_token"),
    }
}

impl Catalog for RestCatalog {
    fn load(&self, table: &TableName) -> Result<Option<String>> {
        let response = self.send(
            self.client.get(self.table_url(table)),
            "cannot look up the table",
        )?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = self.json(response)?;
        match body["metadata-location"].as_str() {
            Some(location) => Ok(Some(location.to_string())),
            None => bail!(
                "the REST catalog {} gave {}.{} without a metadata-location",
                self.shown,
                table.namespace,
                table.name
            ),
        }
    }

    /// A REST catalog's tables are made by [`Catalog::create_empty`] when a run begins;
    /// a table gone from the catalog since is not registered again behind its back.
    fn create(&self, table: &TableName, _metadata: &str) -> Result<bool> {
        bail!(
            "{}.{} is gone from the REST catalog {} since this run began",
            table.namespace,
            table.name,
            self.shown
        )
    }

    fn manages_metadata(&self) -> bool {
        true
    }

    /// `POST …/namespaces` (409, there already, is what was wanted), then
    /// `POST …/namespaces/NS/tables` with the planned location, columns, partitioning
    /// and properties (409: another writer made it first, which the caller's look at
    /// the table checks against the load).
    fn create_empty(&self, table: &TableName, planned: &TableMetadata) -> Result<()> {
        let levels: Vec<&str> = table.namespace.split('.').collect();
        let response = self.send(
            self.client
                .post(format!("{}/namespaces", self.root))
                .json(&json!({ "namespace": levels })),
            "cannot create the namespace",
        )?;
        if !response.status().is_success() && response.status() != StatusCode::CONFLICT {
            bail!("{}", self.refusal(response));
        }
        let response = self.send(
            self.client
                .post(format!(
                    "{}/namespaces/{}/tables",
                    self.root,
                    namespace_path(&table.namespace)
                ))
                .json(&create_request(&table.name, planned)?),
            "cannot create the table",
        )?;
        if response.status() == StatusCode::CONFLICT {
            return Ok(());
        }
        self.json(response).map(drop)
    }

    /// Nothing to do: a catalog that answered holds the commit (its own durability).
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    fn swap(&self, table: &TableName, swap: &Swap<'_>) -> Result<bool> {
        let body = commit_request(swap)?;
        let response = self.send(
            self.client.post(self.table_url(table)).json(&body),
            "cannot commit",
        )?;
        if response.status() == StatusCode::CONFLICT {
            return Ok(false);
        }
        self.json(response).map(|_| true)
    }
}

/// The body of a table's creation: its name, location, columns, partitioning and
/// properties, as `planned` has them (the catalog may give the columns other ids).
fn create_request(name: &str, planned: &TableMetadata) -> Result<Value> {
    let planned: Value = serde_json::from_slice(&planned.to_json()?)?;
    let current = |list: &str, key: &str, id: &str| {
        planned[list]
            .as_array()
            .and_then(|all| all.iter().find(|item| item[key] == planned[id]))
            .cloned()
            .with_context(|| format!("the planned metadata has no {id}"))
    };
    Ok(json!({
        "name": name,
        "location": planned["location"],
        "schema": current("schemas", "schema-id", "current-schema-id")?,
        "partition-spec": current("partition-specs", "spec-id", "default-spec-id")?,
        "write-order": { "order-id": 0, "fields": [] },
        "properties": planned["properties"],
    }))
}

/// The body of a commit: what `swap.next` adds to `swap.base`, on the conditions that
/// make it a compare-and-swap.
fn commit_request(swap: &Swap<'_>) -> Result<Value> {
    let next: Value = serde_json::from_slice(&swap.next.to_json()?)?;
    let id = swap
        .next
        .current_snapshot_id
        .context("a commit without a snapshot")?;
    let snapshot = next["snapshots"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["snapshot-id"] == json!(id)))
        .context("the commit's snapshot is not in its metadata")?;
    let properties: serde_json::Map<String, Value> = swap
        .next
        .properties
        .iter()
        .filter(|(key, value)| swap.base.properties.get(*key) != Some(value))
        .map(|(key, value)| (key.clone(), json!(value)))
        .collect();
    Ok(json!({
        "requirements": [
            { "type": "assert-table-uuid", "uuid": swap.base.table_uuid },
            { "type": "assert-ref-snapshot-id", "ref": "main",
              "snapshot-id": swap.base.current_snapshot_id },
        ],
        "updates": [
            { "action": "add-snapshot", "snapshot": snapshot },
            { "action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
              "snapshot-id": id },
            { "action": "set-properties", "updates": properties },
        ],
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::schema::{Column, ColumnType, Schema};
    use crate::table::iceberg::metadata::Snapshot;

    fn planned() -> TableMetadata {
        let schema = Schema {
            columns: vec![
                Column {
                    name: "id".into(),
                    ty: ColumnType::Int,
                },
                Column {
                    name: "dt".into(),
                    ty: ColumnType::Date,
                },
            ],
        };
        TableMetadata::new(
            "u-1".into(),
            "s3://b/ns/t".into(),
            &schema,
            &["dt".into()],
            5,
        )
        .unwrap()
    }

    fn snapshot(id: i64) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: None,
            sequence_number: 0,
            timestamp_ms: 1_000,
            manifest_list: format!("s3://b/ns/t/metadata/snap-{id}.avro"),
            summary: BTreeMap::from([("operation".to_string(), "append".to_string())]),
            schema_id: None,
        }
    }

    /// The commit's body, as the server gets it.
    fn body(base: &TableMetadata, next: &TableMetadata) -> Value {
        commit_request(&Swap {
            expected: "",
            new: "",
            base,
            next,
        })
        .unwrap()
    }

    #[test]
    fn a_commit_holds_only_where_it_was_made_and_sends_only_what_it_adds() {
        let mut base = planned();
        base.add_snapshot(snapshot(11), None, 10);
        base.properties.insert("kept".into(), "1".into());
        let mut next = base.clone();
        next.add_snapshot(snapshot(22), Some("s3://b/ns/t/metadata/1.json"), 20);
        next.properties
            .insert("ingest.checkpoint.j".into(), "r:2".into());
        let body = body(&base, &next);
        assert_eq!(
            body["requirements"],
            json!([
                { "type": "assert-table-uuid", "uuid": "u-1" },
                { "type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 11 },
            ])
        );
        let updates = &body["updates"];
        assert_eq!(updates[0]["action"], "add-snapshot");
        assert_eq!(updates[0]["snapshot"]["snapshot-id"], 22);
        assert_eq!(updates[0]["snapshot"]["parent-snapshot-id"], 11);
        assert_eq!(updates[0]["snapshot"]["sequence-number"], 2);
        assert_eq!(
            updates[1],
            json!({ "action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                    "snapshot-id": 22 })
        );
        // The property the commit changes, not those it keeps.
        assert_eq!(
            updates[2],
            json!({ "action": "set-properties", "updates": { "ingest.checkpoint.j": "r:2" } })
        );
    }

    #[test]
    fn the_first_commit_holds_only_while_the_table_has_no_snapshot() {
        let base = planned();
        let mut next = base.clone();
        next.add_snapshot(snapshot(33), None, 20);
        let body = body(&base, &next);
        // null: the `main` branch must not exist yet.
        assert_eq!(body["requirements"][1]["snapshot-id"], Value::Null);
        assert!(commit_request(&Swap {
            expected: "",
            new: "",
            base: &base,
            next: &base,
        })
        .is_err());
    }

    #[test]
    fn a_table_is_created_with_the_planned_location_columns_and_partitioning() {
        let body = create_request("t", &planned()).unwrap();
        assert_eq!(body["name"], "t");
        assert_eq!(body["location"], "s3://b/ns/t");
        assert_eq!(body["schema"]["fields"][1]["name"], "dt");
        assert_eq!(body["schema"]["fields"][1]["id"], 2);
        assert_eq!(body["partition-spec"]["fields"][0]["source-id"], 2);
        assert_eq!(body["partition-spec"]["fields"][0]["transform"], "identity");
    }

    #[test]
    fn a_nested_namespace_is_one_path_segment() {
        assert_eq!(namespace_path("default"), "default");
        assert_eq!(namespace_path("a.b"), "a%1Fb");
    }
}
