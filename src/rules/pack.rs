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
