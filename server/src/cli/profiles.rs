//! Saved server profiles: `tsblob alias add NAME URL [--token T]`, then `-a NAME` on any
//! client command. Kept in `<config dir>/tsblob/aliases.toml` (`$XDG_CONFIG_HOME` or
//! `~/.config` on Linux), written with mode 0600 since it holds tokens.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::usage::Usage;
use serde::{Deserialize, Serialize};

/// One server: its URL and, if it needs one, a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The saved profiles, by alias.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Profiles {
    #[serde(default)]
    aliases: BTreeMap<String, Profile>,
}

/// The file the profiles live in.
pub fn path() -> anyhow::Result<PathBuf> {
    let dir = dirs::config_dir().context(
        "no configuration folder for this user (set HOME or XDG_CONFIG_HOME) to keep aliases in",
    )?;
    Ok(dir.join("tsblob").join("aliases.toml"))
}

impl Profiles {
    /// The saved profiles (none if the file does not exist yet).
    pub fn load() -> anyhow::Result<Profiles> {
        let path = path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).with_context(|| {
                format!(
                    "{} is not a valid aliases file: fix or remove it",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Profiles::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// The profile `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> anyhow::Result<Profile> {
        match self.aliases.get(name) {
            Some(p) => Ok(p.clone()),
            None => {
                let known: Vec<&str> = self.aliases.keys().map(String::as_str).collect();
                Err(Usage(format!(
                    "no alias {name:?} (known: {}): add it with `tsblob alias add {name} URL --token ...`",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
                .into())
            }
        }
    }

    /// Every profile, by alias.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Profile)> {
        self.aliases.iter()
    }

    /// Adds or replaces a profile.
    pub fn set(&mut self, name: &str, profile: Profile) -> anyhow::Result<()> {
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Usage(format!("alias {name:?}: give a name without spaces")).into());
        }
        if !(profile.url.starts_with("http://") || profile.url.starts_with("https://")) {
            return Err(Usage(format!(
                "URL {:?} must start with http:// or https://",
                profile.url
            ))
            .into());
        }
        self.aliases.insert(name.to_string(), profile);
        Ok(())
    }

    /// Removes a profile; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.aliases.remove(name).is_some()
    }

    /// Writes the profiles: a temporary file (0600) renamed over the old one.
    pub fn save(&self) -> anyhow::Result<()> {
        let path = path()?;
        let dir = path.parent().context("the aliases file has no folder")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let text = toml::to_string(self).context("cannot encode the aliases")?;
        let tmp = path.with_extension("toml.tmp");
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
        Ok(())
    }
}

/// `tsblob alias ...`
#[derive(Debug, clap::Args)]
pub struct AliasArgs {
    #[command(subcommand)]
    pub command: AliasCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AliasCommand {
    /// Save a server as NAME (replacing an alias of that name).
    Add {
        name: String,
        /// The server's URL, e.g. http://robot1:8686.
        url: String,
        /// The token to send to it.
        #[arg(long)]
        token: Option<String>,
    },
    /// List the saved servers (tokens are not shown).
    Ls {
        /// JSON lines: {"alias", "url", "token": true|false}.
        #[arg(long)]
        json: bool,
    },
    /// Forget a saved server.
    Rm { name: String },
}

pub fn alias(args: AliasArgs) -> anyhow::Result<()> {
    let mut profiles = Profiles::load()?;
    match args.command {
        AliasCommand::Add { name, url, token } => {
            let url = url.trim_end_matches('/').to_string();
            profiles.set(
                &name,
                Profile {
                    url: url.clone(),
                    token,
                },
            )?;
            profiles.save()?;
            println!("alias {name} → {url}");
        }
        AliasCommand::Ls { json } => {
            for (name, p) in profiles.iter() {
                if json {
                    let line = serde_json::json!({"alias": name, "url": p.url, "token": p.token.is_some()});
                    println!("{line}");
                } else {
                    let token = if p.token.is_some() {
                        "token"
                    } else {
                        "no token"
                    };
                    println!("{name:<16} {}  ({token})", p.url);
                }
            }
        }
        AliasCommand::Rm { name } => {
            if !profiles.remove(&name) {
                bail!("no alias {name:?}: `tsblob alias ls` lists them");
            }
            profiles.save()?;
            println!("removed alias {name}");
        }
    }
    Ok(())
}
