//! Where this process stands in its job, as its launcher says: the one place the launchers'
//! variables are read. torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`),
//! SLURM (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NTASKS_PER_NODE`,
//! `SLURM_CPUS_PER_TASK`), Open MPI (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
//! `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`) and MPICH/Intel MPI's
//! Hydra (`PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`), asked in that
//! order. Option defaults, the CLI and the Python package all read it here; in Python a
//! torch.distributed process group, when there is one, still wins.
//!
//! ```
//! use loader_core::Launch;
//!
//! let vars = [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "4")];
//! let launch = Launch::from_vars(|name| {
//!     vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
//! })
//! .unwrap();
//! assert_eq!((launch.rank, launch.world_size), (3, 8));
//! assert_eq!((launch.local_rank, launch.node_ranks), (Some(1), Some(4)));
//! assert_eq!(launch.decode_threads(16), 4); // the node's 16 cores shared by its 4 ranks
//! ```

use crate::error::ConfigError;

/// One launcher's names for rank, world size, local rank and ranks per node.
struct Launcher {
    name: &'static str,
    rank: &'static str,
    world: &'static str,
    local_rank: &'static str,
    node_ranks: &'static str,
}

const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        name: "torchrun",
        rank: "RANK",
        world: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        node_ranks: "LOCAL_WORLD_SIZE",
    },
    Launcher {
        name: "SLURM",
        rank: "SLURM_PROCID",
        world: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        node_ranks: "SLURM_NTASKS_PER_NODE",
    },
    Launcher {
        name: "Open MPI",
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        node_ranks: "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    Launcher {
        name: "MPI (PMI)",
        rank: "PMI_RANK",
        world: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        node_ranks: "MPI_LOCALNRANKS",
    },
];

/// SLURM's share of a node's CPUs for each task, when it says.
const CPUS_PER_TASK: &str = "SLURM_CPUS_PER_TASK";

/// This process's place in its job, from its launcher's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Launch {
    /// This process's rank (0 without a launcher).
    pub rank: usize,
    /// Processes in the job (1 without a launcher).
    pub world_size: usize,
    /// This process's place among its node's ranks, if the launcher says.
    pub local_rank: Option<usize>,
    /// Ranks on this node, if the launcher says.
    pub node_ranks: Option<usize>,
    /// CPUs this process may use, if the launcher says (SLURM's per-task share).
    pub cpus: Option<usize>,
    /// The launcher whose variables gave rank and world size; `None` without one.
    pub launcher: Option<&'static str>,
}

/// Rank 0 of 1, no launcher.
impl Default for Launch {
    fn default() -> Self {
        Self {
            rank: 0,
            world_size: 1,
            local_rank: None,
            node_ranks: None,
            cpus: None,
            launcher: None,
        }
    }
}

impl Launch {
    /// This process's launch, from its environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// This process's node as its environment says (ranks per node, local rank, CPUs),
    /// whatever its rank variables say: what the node's share of cores and cache needs,
    /// when rank and world size come from elsewhere (the options, a process group).
    pub fn node_from_env() -> Self {
        Self::node_from_vars(|name| std::env::var(name).ok())
    }

    /// [`Launch::node_from_env`], reading the variables through `get`.
    pub fn node_from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        Launch {
            cpus: leading_number(get(CPUS_PER_TASK)).filter(|&n| n > 0),
            local_rank: LAUNCHERS
                .iter()
                .find_map(|l| leading_number(get(l.local_rank))),
            node_ranks: LAUNCHERS
                .iter()
                .find_map(|l| leading_number(get(l.node_ranks)).filter(|&n| n > 0)),
            ..Launch::default()
        }
    }

    /// The launch the variables `get` reads say: rank and world size from the first
    /// launcher that sets either (both, or an error naming the one missing), the node's
    /// share from the first that sets it.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let invalid = |variable: String, problem: String| {
            ConfigError::Option(format!("the launcher's {variable}: {problem}"))
        };
        let whole = |name: &str, value: &str| {
            value.trim().parse::<usize>().map_err(|_| {
                invalid(
                    format!("{name}={value:?}"),
                    "not a non-negative whole number".into(),
                )
            })
        };
        let mut launch = Self::node_from_vars(&get);
        for l in &LAUNCHERS {
            match (get(l.rank), get(l.world)) {
                (None, None) => continue,
                (Some(rank), Some(world)) => {
                    let (rank, world) = (whole(l.rank, &rank)?, whole(l.world, &world)?);
                    if world == 0 {
                        return Err(invalid(
                            format!("{}=0", l.world),
                            "the world size must be at least 1".into(),
                        ));
                    }
                    if rank >= world {
                        return Err(invalid(
                            format!("{}={rank}", l.rank),
                            format!("not below {}={world}", l.world),
                        ));
                    }
                    (launch.rank, launch.world_size) = (rank, world);
                    launch.launcher = Some(l.name);
                    break;
                }
                (Some(_), None) => {
                    return Err(invalid(
                        l.rank.into(),
                        format!("set, but {} is not", l.world),
                    ));
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        l.world.into(),
                        format!("set, but {} is not", l.rank),
                    ));
                }
            }
        }
        Ok(launch)
    }

    /// Decode threads when none are given: the launcher's CPUs for this task, else the
    /// node's `cores` shared by its ranks, at least one. Without this, 8 ranks of a node
    /// would each start a thread per core, 8 times what the node has.
    pub fn decode_threads(&self, cores: usize) -> usize {
        if let Some(cpus) = self.cpus {
            return cpus.min(cores).max(1);
        }
        (cores / self.node_ranks.unwrap_or(1)).max(1)
    }
}

/// The number a variable starts with: SLURM's "8(x2)" (8 tasks on each of 2 nodes) reads
/// as 8.
fn leading_number(value: Option<String>) -> Option<usize> {
    let value = value?;
    let digits: String = value
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn launch(pairs: &'static [(&'static str, &'static str)]) -> Launch {
        Launch::from_vars(env(pairs)).unwrap()
    }

    #[test]
    fn reads_torchrun_slurm_and_mpi_variables() {
        let none = launch(&[]);
        assert_eq!((none.rank, none.world_size, none.launcher), (0, 1, None));
        let torchrun = launch(&[("RANK", "3"), ("WORLD_SIZE", "8")]);
        assert_eq!((torchrun.rank, torchrun.world_size), (3, 8));
        assert_eq!(torchrun.launcher, Some("torchrun"));
        let slurm = launch(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]);
        assert_eq!((slurm.rank, slurm.world_size), (1, 2));
        let ompi = launch(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]);
        assert_eq!((ompi.rank, ompi.world_size), (5, 16));
        assert_eq!((ompi.local_rank, ompi.node_ranks), (Some(1), Some(4)));
        let pmi = launch(&[("PMI_RANK", "2"), ("PMI_SIZE", "3")]);
        assert_eq!(
            (pmi.rank, pmi.world_size, pmi.launcher),
            (2, 3, Some("MPI (PMI)"))
        );
        // torchrun under SLURM: torchrun's own variables name the process.
        let both = launch(&[
            ("RANK", "7"),
            ("WORLD_SIZE", "16"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
        ]);
        assert_eq!((both.rank, both.world_size), (7, 16));
    }

    #[test]
    fn refuses_nonsense_with_a_reason() {
        for (pairs, needle) in [
            (&[("RANK", "4"), ("WORLD_SIZE", "4")][..], "not below"),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")][..], "at least 1"),
            (
                &[("RANK", "x"), ("WORLD_SIZE", "2")][..],
                "not a non-negative",
            ),
            (
                &[("RANK", "-1"), ("WORLD_SIZE", "2")][..],
                "not a non-negative",
            ),
            (&[("RANK", "0")][..], "WORLD_SIZE is not"),
            (&[("PMI_SIZE", "2")][..], "PMI_RANK is not"),
        ] {
            let pairs: &'static [(&'static str, &'static str)] = pairs;
            let err = Launch::from_vars(env(pairs)).unwrap_err();
            assert!(err.to_string().contains(needle), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn decode_threads_share_the_node_among_its_ranks() {
        assert_eq!(launch(&[]).decode_threads(16), 16);
        assert_eq!(launch(&[("LOCAL_WORLD_SIZE", "8")]).decode_threads(16), 2);
        assert_eq!(launch(&[("LOCAL_WORLD_SIZE", "8")]).decode_threads(4), 1);
        assert_eq!(
            launch(&[("SLURM_NTASKS_PER_NODE", "4(x2)")]).decode_threads(16),
            4
        );
        let slurm = launch(&[("SLURM_NTASKS_PER_NODE", "8"), ("SLURM_CPUS_PER_TASK", "6")]);
        assert_eq!(slurm.decode_threads(64), 6);
        assert_eq!(launch(&[("LOCAL_WORLD_SIZE", "x")]).decode_threads(16), 16);
    }

    #[test]
    fn the_nodes_ranks_come_from_the_launcher_or_the_options() {
        let mut o = crate::LoaderOptions {
            rank: 5,
            world_size: 16,
            ..crate::LoaderOptions::default()
        };
        assert_eq!(o.node_ranks(&launch(&[])).unwrap(), 5..6);
        let torchrun = launch(&[("LOCAL_WORLD_SIZE", "4"), ("LOCAL_RANK", "1")]);
        assert_eq!(o.node_ranks(&torchrun).unwrap(), 4..8);
        let slurm = launch(&[("SLURM_NTASKS_PER_NODE", "8(x2)"), ("SLURM_LOCALID", "5")]);
        assert_eq!(o.node_ranks(&slurm).unwrap(), 0..8);
        o.cache.node_ranks = Some(8);
        assert_eq!(o.node_ranks(&launch(&[])).unwrap(), 0..8);
        o.cache.local_rank = Some(9);
        assert!(o.node_ranks(&launch(&[])).is_err());
        // A node larger than the world holds the world.
        o.world_size = 2;
        o.rank = 1;
        o.cache.local_rank = None;
        assert_eq!(o.node_ranks(&launch(&[])).unwrap(), 0..2);
        // One rank alone, as a loader without ranks under torchrun is.
        o.world_size = 1;
        o.rank = 0;
        let torchrun = launch(&[("LOCAL_WORLD_SIZE", "4"), ("LOCAL_RANK", "3")]);
        assert_eq!(o.node_ranks(&torchrun).unwrap(), 0..1);
    }
}
