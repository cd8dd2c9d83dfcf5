//! The command line: `kubectl gprobe trace TARGET PROBE [flags]`.

use clap::{Args, Parser, Subcommand};
use std::time::Duration;

/// Ad-hoc tracing of a workload's functions with gprobe: creates a ProbeSpec that selects
/// the target's pods, streams their calls to the terminal as they happen, and deletes the
/// spec at the end (Ctrl-C or --for).
#[derive(Debug, Parser)]
#[command(name = "kubectl gprobe", bin_name = "kubectl gprobe", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace one function in the pods of TARGET until Ctrl-C or --for.
    Trace(TraceArgs),
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// TARGET PROBE. TARGET is what to trace: `deploy/NAME` (also `deployment/`, `sts/`,
    /// `statefulset/`, `ds/`, `daemonset/`) or `pod/NAME`; left out with `-l SELECTOR`.
    /// PROBE is the function, as `gprobe trace` takes it: `SYMBOL(CAPTURE, ...) -> RESULT,
    /// ...`, e.g. `'net/http.(*Client).Get(url) -> err'`.
    #[arg(value_name = "TARGET PROBE", num_args = 1..=2, required = true)]
    pub args: Vec<String>,
    /// Trace the pods this label selector selects (`app=web,tier!=db`) instead of TARGET.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// The namespace of the target (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Trace only this container of the pods (a glob); default: every container.
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// The function's signature, for binaries without DWARF (`func(c *Client, url string)
    /// (resp *Response, err error)`, or a C prototype).
    #[arg(long)]
    pub signature: Option<String>,
    /// Keep only the calls for which this holds, decided in the kernel (`err != nil`,
    /// `duration > 100ms`); the others are counted as filtered.
    #[arg(long)]
    pub when: Option<String>,
    /// Stop after this long (`20s`, `5m`); the trace's ProbeSpec expires this long after
    /// its creation plus --expiry-margin even if this command is killed. Default: until
    /// Ctrl-C, with an expiry of 1h.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub for_: Option<Duration>,
    /// How long after --for the operator deletes the ProbeSpec if this command could not
    /// (killed, disconnected). Without --for, the expiry is 1h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub expiry_margin: Duration,
    /// Print a log2 histogram of the calls' durations at the end (it counts the calls
    /// printed).
    #[arg(long)]
    pub hist: bool,
    /// Print the ProbeSpec that would be created, and create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output: `table` or `json` (JSON lines, the records of `gprobe run --output json`).
    /// Default: a table on a terminal, JSON lines otherwise.
    #[arg(short = 'o', long, value_parser = ["table", "json"])]
    pub output: Option<String>,
    /// The namespace gprobe's agents run in (the chart's release namespace). Default:
    /// $GPROBE_NAMESPACE, else `gprobe-system`.
    #[arg(long)]
    pub gprobe_namespace: Option<String>,
    /// The label selector of gprobe's agent pods in --gprobe-namespace.
    #[arg(
        long,
        default_value = "app.kubernetes.io/name=gprobe,app.kubernetes.io/component=agent"
    )]
    pub agent_selector: String,
    /// The agents' health port, where they serve trace streams (the chart's
    /// agent.healthPort).
    #[arg(long, default_value_t = 9090)]
    pub agent_port: u16,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// Act as this user (impersonation, as `kubectl --as`).
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as this group too (repeatable; as `kubectl --as-group`).
    #[arg(long = "as-group", value_name = "GROUP")]
    pub as_groups: Vec<String>,
}

/// Where gprobe runs when neither --gprobe-namespace nor $GPROBE_NAMESPACE says.
pub const DEFAULT_GPROBE_NAMESPACE: &str = "gprobe-system";

impl TraceArgs {
    /// --gprobe-namespace, else $GPROBE_NAMESPACE, else [`DEFAULT_GPROBE_NAMESPACE`].
    pub fn gprobe_namespace(&self) -> String {
        self.gprobe_namespace
            .clone()
            .or_else(|| {
                std::env::var("GPROBE_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_GPROBE_NAMESPACE.to_string())
    }

    /// `(TARGET, PROBE)`: one of TARGET and `-l` is given, never both.
    pub fn target_and_probe(&self) -> Result<(Option<&str>, &str), String> {
        match (self.args.as_slice(), &self.selector) {
            ([probe], Some(_)) => Ok((None, probe)),
            ([target, probe], None) => Ok((Some(target), probe)),
            ([_], None) => Err("give TARGET (deploy/NAME, pod/NAME) or -l SELECTOR, then \
                 PROBE"
                .into()),
            (_, _) => Err("give either TARGET or -l SELECTOR, not both".into()),
        }
    }
}

/// `500ms`, `20s`, `5m`, `1h`, or whole seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: not a duration (e.g. 500ms, 20s, 5m, 1h)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn the_command_line_parses() {
        let cli = Cli::try_parse_from([
            "kubectl-gprobe",
            "trace",
            "deploy/web",
            "net/http.(*Client).Get(url) -> err",
            "-n",
            "shop",
            "--for",
            "20s",
            "--hist",
        ])
        .unwrap();
        let Command::Trace(t) = cli.command;
        assert_eq!(
            t.target_and_probe(),
            Ok((Some("deploy/web"), "net/http.(*Client).Get(url) -> err"))
        );
        assert_eq!(t.for_, Some(Duration::from_secs(20)));
        assert!(t.hist);
        let by_label =
            Cli::try_parse_from(["kubectl-gprobe", "trace", "-l", "app=web", "main.f"]).unwrap();
        let Command::Trace(t) = by_label.command;
        assert_eq!(t.target_and_probe(), Ok((None, "main.f")));
        let both = Cli::try_parse_from(["kubectl-gprobe", "trace", "-l", "a=b", "pod/x", "main.f"])
            .unwrap();
        let Command::Trace(t) = both.command;
        assert!(t.target_and_probe().is_err());
    }
}
