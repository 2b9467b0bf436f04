//! `tsblob bench`: replays one seeded workload against tsblob, MinIO and ReductStore.

/// Flags of `tsblob bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Peers to compare against tsblob, comma separated: minio, reductstore.
    #[arg(long, value_delimiter = ',')]
    pub against: Vec<String>,
}

/// Runs the comparison and prints the report.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("comparison mode is not built yet (asked for {:?})", args.against)
}
