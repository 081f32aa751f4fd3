//! The `--query.metric-aliases.file` and `--query.no-metric-aliases` flags: which metric
//! renames PromQL evaluation bridges (see [`inferdb_query::aliases`]).
//!
//! The file is a YAML mapping of old metric (family) names to new ones, added to the
//! built-in vLLM catalogue:
//!
//! ```yaml
//! # old: new
//! myserver:queue_len: myserver:num_requests_waiting
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use inferdb_query::aliases::AliasError;
use inferdb_query::MetricAliases;

/// Why the aliases file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AliasFileError {
    /// The file cannot be read.
    #[error("reading metric aliases file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a YAML mapping of names to names.
    #[error("metric aliases file {path}: {msg} (expected a YAML mapping `old_name: new_name`)")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A pair is refused.
    #[error("metric aliases file {path}: {source}")]
    Alias {
        /// The file.
        path: PathBuf,
        /// Why.
        source: AliasError,
    },
    /// Both flags were given.
    #[error("--query.metric-aliases.file and --query.no-metric-aliases exclude each other")]
    Both,
}

/// The metric-alias flags, shared by `serve`, `query`, `advise` and `compare`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AliasArgs {
    /// A YAML file of further metric renames (`old_name: new_name`), added to the built-in
    /// vLLM catalogue (vllm:gpu_cache_usage_perc -> vllm:kv_cache_usage_perc,
    /// vllm:gpu_prefix_cache_{queries,hits} -> vllm:prefix_cache_{queries,hits},
    /// vllm:time_per_output_token_seconds -> vllm:inter_token_latency_seconds). A PromQL
    /// selector of a new name also reads the old name's series (every series of the family:
    /// _total, _bucket, _sum, _count, _created) under the new name; the answer's infos say so.
    #[arg(long = "query.metric-aliases.file", value_name = "FILE")]
    pub aliases_file: Option<PathBuf>,
    /// Answer PromQL exactly as Prometheus does: no metric-rename bridging.
    #[arg(long = "query.no-metric-aliases")]
    pub no_aliases: bool,
}

impl AliasArgs {
    /// The catalogue these flags select: `None` with `--query.no-metric-aliases`.
    pub fn load(&self) -> Result<Option<Arc<MetricAliases>>, AliasFileError> {
        match (&self.aliases_file, self.no_aliases) {
            (Some(_), true) => Err(AliasFileError::Both),
            (None, true) => Ok(None),
            (None, false) => Ok(Some(Arc::new(MetricAliases::builtin()))),
            (Some(p), false) => Ok(Some(Arc::new(load_file(p)?))),
        }
    }
}

/// The built-in catalogue plus the pairs of the YAML file at `path`.
pub fn load_file(path: &Path) -> Result<MetricAliases, AliasFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| AliasFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|e| match e {
        ParseError::Yaml(msg) => AliasFileError::Parse {
            path: path.to_path_buf(),
            msg,
        },
        ParseError::Alias(source) => AliasFileError::Alias {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Why an aliases text is refused.
#[derive(Debug)]
pub enum ParseError {
    /// Not a mapping of strings.
    Yaml(String),
    /// A refused pair.
    Alias(AliasError),
}

/// The built-in catalogue plus the pairs of an aliases file's text (an empty file adds none).
pub fn parse(text: &str) -> Result<MetricAliases, ParseError> {
    let mut aliases = MetricAliases::builtin();
    if text.trim().is_empty() {
        return Ok(aliases);
    }
    let map: serde_yaml::Mapping =
        serde_yaml::from_str(text).map_err(|e| ParseError::Yaml(e.to_string()))?;
    for (k, v) in map {
        let (Some(old), Some(new)) = (k.as_str(), v.as_str()) else {
            return Err(ParseError::Yaml(format!(
                "entry {k:?}: {v:?} is not a pair of names"
            )));
        };
        aliases.add_family(old, new).map_err(ParseError::Alias)?;
    }
    Ok(aliases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_extends_the_builtin_catalogue() {
        let a = parse("# old: new\nfoo:queue_len: foo:num_waiting\n").unwrap();
        assert_eq!(
            a.old_names("foo:num_waiting_total"),
            ["foo:queue_len_total"]
        );
        assert_eq!(
            a.old_names("vllm:kv_cache_usage_perc"),
            ["vllm:gpu_cache_usage_perc"]
        );
        assert_eq!(parse("").unwrap(), MetricAliases::builtin());
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for bad in [
            "- a\n- b\n",
            "a: [b]\n",
            "a: 1\n",
            "'a b': c\n",
            "a: a\n",
            "vllm:kv_cache_usage_perc: x\n",
            "{{{",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        let both = AliasArgs {
            aliases_file: Some("x".into()),
            no_aliases: true,
        };
        assert!(matches!(both.load(), Err(AliasFileError::Both)));
        let none = AliasArgs {
            aliases_file: None,
            no_aliases: true,
        };
        assert!(none.load().unwrap().is_none());
        assert!(AliasArgs::default().load().unwrap().is_some());
    }
}
