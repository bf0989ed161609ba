//! Which ids run: criterion's positional filter, read as a plain substring (or `a|b`) so a
//! shape none of whose ids match is not even set up.

/// The positional filter given on the command line, if it is a plain substring (criterion
/// treats it as a regex; with regex syntax in it we cannot tell, so nothing is skipped).
pub(crate) fn plain_filter() -> Option<String> {
    let mut args = std::env::args().skip(1);
    let mut filter = None;
    while let Some(a) = args.next() {
        if a == "--bench" || a == "--test" || a == "--list" || a == "--exact" {
            continue;
        }
        if a.starts_with("--") {
            // Options with a value.
            if matches!(
                a.as_str(),
                "--save-baseline"
                    | "--baseline"
                    | "--load-baseline"
                    | "--sample-size"
                    | "--warm-up-time"
                    | "--measurement-time"
                    | "--profile-time"
                    | "--color"
                    | "--output-format"
                    | "--plotting-backend"
                    | "--noise-threshold"
                    | "--confidence-level"
                    | "--significance-level"
                    | "--nresamples"
            ) {
                args.next();
            }
            continue;
        }
        filter = Some(a);
    }
    filter.filter(|f| !f.chars().any(|c| "^$.*+?()[]{}\\".contains(c)))
}

/// Whether `id` matches the filter: a substring, or `a|b|…` for any of several (the same
/// meaning the regex has for criterion).
pub(crate) fn wanted(filter: &Option<String>, id: &str) -> bool {
    filter
        .as_ref()
        .is_none_or(|f| f.split('|').any(|alt| id.contains(alt)))
}
