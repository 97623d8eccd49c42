//! Secrets that Optio reads for the services it uses (etcd's and Redis's passwords): from an
//! environment variable, or from a file another variable names — never from the command line,
//! where any local user can read them in `ps`.

/// The secret in `var`, or the first line of the file `file_var` names (a trailing newline
/// dropped); `None` when neither is set. `var` wins when both are.
pub fn from_env(var: &str, file_var: &str) -> Result<Option<String>, String> {
    match (std::env::var(var), std::env::var_os(file_var)) {
        (Ok(secret), _) => Ok(Some(secret)),
        (Err(_), Some(path)) => Ok(Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {file_var} ({}): {e}", path.to_string_lossy()))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        )),
        (Err(_), None) => Ok(None),
    }
}
