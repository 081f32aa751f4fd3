//! The vLLM rule pack (`deploy/rules/vllm.yml`) built into the binary, so `serve --demo`
//! evaluates it wherever the binary runs; the file in `deploy/rules/` is what an existing
//! Prometheus loads through `rule_files:`.

/// The pack's text, byte for byte the file `deploy/rules/vllm.yml`.
pub const VLLM_RULES: &str = include_str!("../../deploy/rules/vllm.yml");

/// The file name the embedded pack is loaded under (rule-group hashes, `/api/v1/rules`'
/// `file` and error messages name it).
pub const VLLM_RULES_FILE: &str = "vllm.yml";

/// The pack's groups, parsed as a rule file is.
pub fn vllm_groups() -> Result<super::file::RuleFile, super::file::RuleFileErrors> {
    super::file::parse(VLLM_RULES, false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pack_parses_with_its_groups() {
        let f = super::vllm_groups().unwrap();
        let names: Vec<&str> = f.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vllm-throughput",
                "vllm-cache",
                "vllm-latency",
                "vllm-load",
                "vllm-slo",
                "vllm-alerts"
            ]
        );
        let alerts = f
            .groups
            .iter()
            .flat_map(|g| &g.rules)
            .filter(|r| !r.alert.is_empty());
        for r in alerts {
            for key in ["summary", "description"] {
                assert!(
                    r.annotations.iter().any(|(k, v)| k == key && !v.is_empty()),
                    "{:?} lacks {key}",
                    r.alert
                );
            }
        }
    }
}
