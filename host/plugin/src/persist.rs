//! Persistence of plugin versions behind a small trait, so the storage
//! gateway can back it; [`DirStore`] (a directory) and [`MemoryStore`] here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::runtime::World;

/// Where a version stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    /// Deployed and checked; not serving.
    Ready,
    /// Serving its slot.
    Active,
    /// Was active; kept for rollback.
    Retired,
    /// Rolled back automatically after repeated faults.
    Failed,
}

/// What is known about one deployed version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Slot, such as `placement/batch`.
    pub slot: String,
    /// Plugin name.
    pub name: String,
    /// Version string chosen by the deployer.
    pub version: String,
    /// SHA-256 of the component, hex.
    pub sha256: String,
    /// The world it implements.
    pub world: World,
    /// Deploy time, milliseconds since the Unix epoch.
    pub deployed_at_ms: u64,
    /// Current state.
    pub state: VersionState,
    /// The version's own call deadline in milliseconds, when it has one
    /// (`Registry::set_deadline`); otherwise the runtime's `call_deadline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The version's own candidate setting (`Registry::set_candidates`):
    /// how many feasible hosts it is offered per group of alike tasks;
    /// `None` takes the slot's (decision 0054).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<crate::Candidates>,
}

impl VersionRecord {
    /// `name@version`, the version's id within its slot.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// Durable storage of versions and of each slot's activation history.
pub trait VersionStore: Send + Sync {
    /// Saves a new version and its bytes.
    fn save_version(&self, record: &VersionRecord, wasm: &[u8]) -> Result<(), String>;
    /// Updates a version's record (its state).
    fn update_version(&self, record: &VersionRecord) -> Result<(), String>;
    /// Records a slot's activation history; the last id is the active one.
    fn save_history(&self, slot: &str, history: &[String]) -> Result<(), String>;
    /// Every version with its bytes.
    fn load_versions(&self) -> Result<Vec<(VersionRecord, Vec<u8>)>, String>;
    /// Every slot's activation history.
    fn load_histories(&self) -> Result<BTreeMap<String, Vec<String>>, String>;
}

/// Versions in memory (tests, `paceline plugin run`).
#[derive(Debug, Default)]
pub struct MemoryStore {
    versions: Mutex<Vec<(VersionRecord, Vec<u8>)>>,
    histories: Mutex<BTreeMap<String, Vec<String>>>,
}

impl VersionStore for MemoryStore {
    fn save_version(&self, record: &VersionRecord, wasm: &[u8]) -> Result<(), String> {
        self.versions.lock().map_err(|e| e.to_string())?.push((record.clone(), wasm.to_vec()));
        Ok(())
    }
    fn update_version(&self, record: &VersionRecord) -> Result<(), String> {
        let mut v = self.versions.lock().map_err(|e| e.to_string())?;
        if let Some((r, _)) = v.iter_mut().find(|(r, _)| r.slot == record.slot && r.id() == record.id()) {
            *r = record.clone();
        }
        Ok(())
    }
    fn save_history(&self, slot: &str, history: &[String]) -> Result<(), String> {
        self.histories.lock().map_err(|e| e.to_string())?.insert(slot.to_string(), history.to_vec());
        Ok(())
    }
    fn load_versions(&self) -> Result<Vec<(VersionRecord, Vec<u8>)>, String> {
        Ok(self.versions.lock().map_err(|e| e.to_string())?.clone())
    }
    fn load_histories(&self) -> Result<BTreeMap<String, Vec<String>>, String> {
        Ok(self.histories.lock().map_err(|e| e.to_string())?.clone())
    }
}

/// Versions in a directory: `<dir>/<slot>/<id>.wasm` and `.json`, and
/// `<dir>/history.json`. Files are written to a temporary name, synced and
/// renamed, so a crash leaves the old or the new content, never half.
#[derive(Debug)]
pub struct DirStore {
    dir: PathBuf,
    lock: Mutex<()>,
}

impl DirStore {
    /// Opens (creating) a store in `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DirStore, String> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(DirStore { dir, lock: Mutex::new(()) })
    }

    fn slot_dir(&self, slot: &str) -> PathBuf {
        self.dir.join(slot.replace('/', "__"))
    }

    fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
        use std::io::Write;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl VersionStore for DirStore {
    fn save_version(&self, record: &VersionRecord, wasm: &[u8]) -> Result<(), String> {
        let _g = self.lock.lock().map_err(|e| e.to_string())?;
        let dir = self.slot_dir(&record.slot);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Self::write_atomic(&dir.join(format!("{}.wasm", record.id())), wasm)?;
        let json = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
        Self::write_atomic(&dir.join(format!("{}.json", record.id())), &json)
    }

    fn update_version(&self, record: &VersionRecord) -> Result<(), String> {
        let _g = self.lock.lock().map_err(|e| e.to_string())?;
        let json = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
        Self::write_atomic(&self.slot_dir(&record.slot).join(format!("{}.json", record.id())), &json)
    }

    fn save_history(&self, slot: &str, history: &[String]) -> Result<(), String> {
        let _g = self.lock.lock().map_err(|e| e.to_string())?;
        let path = self.dir.join("history.json");
        let mut all: BTreeMap<String, Vec<String>> = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(_) => BTreeMap::new(),
        };
        all.insert(slot.to_string(), history.to_vec());
        Self::write_atomic(&path, &serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?)
    }

    fn load_versions(&self) -> Result<Vec<(VersionRecord, Vec<u8>)>, String> {
        let mut out = Vec::new();
        let Ok(slots) = std::fs::read_dir(&self.dir) else { return Ok(out) };
        for slot in slots.flatten().filter(|e| e.path().is_dir()) {
            for f in std::fs::read_dir(slot.path()).map_err(|e| e.to_string())?.flatten() {
                let p = f.path();
                if p.extension().is_some_and(|x| x == "json") {
                    let rec: VersionRecord = serde_json::from_slice(&std::fs::read(&p).map_err(|e| e.to_string())?)
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                    let wasm = std::fs::read(p.with_extension("wasm")).map_err(|e| format!("{}: {e}", p.display()))?;
                    out.push((rec, wasm));
                }
            }
        }
        out.sort_by_key(|(r, _)| (r.slot.clone(), r.deployed_at_ms, r.id()));
        Ok(out)
    }

    fn load_histories(&self) -> Result<BTreeMap<String, Vec<String>>, String> {
        let path = self.dir.join("history.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", path.display())),
            Err(_) => Ok(BTreeMap::new()),
        }
    }
}
