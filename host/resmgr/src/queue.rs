//! Queued gangs: a slab of gang records and, per leaf pool, a queue ordered
//! by priority then arrival.
//!
//! Gangs are the unit of admission. A gang admitted from the middle of a
//! queue (because the gang ahead of it waits on something that does not
//! block it) leaves a stale entry behind that is dropped when it reaches the
//! front, so admission never shifts a queue.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use crate::amounts::Amounts;
use crate::gang::{GangId, GangSpec};
use crate::reason::PendingReason;

/// The three admission lanes of a pool's queue; a blocked lane does not stop the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Non-revocable, preemptible.
    Preemptible = 0,
    /// Non-revocable, non-preemptible: also bound by reservation.
    NonPreemptible = 1,
    /// Revocable: bound by slack entitlement.
    Revocable = 2,
}

impl Lane {
    pub(crate) fn of(spec: &GangSpec) -> Lane {
        if spec.revocable {
            Lane::Revocable
        } else if spec.preemptible {
            Lane::Preemptible
        } else {
            Lane::NonPreemptible
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct GangSlot {
    pub generation: u32,
    pub queued: bool,
    pub pool: u32,
    pub spec: GangSpec,
    pub total: Amounts,
    pub enqueued_ms: u64,
    pub reason: PendingReason,
}

/// One leaf pool's queue.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoolQueue {
    /// Priority (descending) → gangs in arrival order (raw [`GangId`]s; may hold stale ones).
    pub levels: BTreeMap<Reverse<u32>, VecDeque<u64>>,
    /// Live queued gangs per lane.
    pub per_lane: [u32; 3],
    /// The gang that blocked each lane in the last admission pass.
    pub blocked: [Option<GangId>; 3],
    /// In the manager's list of pools with queued gangs.
    pub active: bool,
}

impl PoolQueue {
    pub fn len(&self) -> u32 {
        self.per_lane.iter().sum()
    }
}

/// The slab of gang records.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gangs {
    pub slots: Vec<GangSlot>,
    free: Vec<u32>,
}

impl Gangs {
    pub fn insert(&mut self, slot: GangSlot) -> GangId {
        match self.free.pop() {
            Some(i) => {
                let generation = self.slots[i as usize].generation.wrapping_add(1);
                self.slots[i as usize] = GangSlot { generation, ..slot };
                GangId::new(i, generation)
            }
            None => {
                self.slots.push(GangSlot { generation: 0, ..slot });
                GangId::new((self.slots.len() - 1) as u32, 0)
            }
        }
    }

    /// The live queued gang with this id.
    pub fn get(&self, id: GangId) -> Option<&GangSlot> {
        self.slots.get(id.index()).filter(|s| s.queued && s.generation == id.generation())
    }

    pub fn get_mut(&mut self, id: GangId) -> Option<&mut GangSlot> {
        self.slots.get_mut(id.index()).filter(|s| s.queued && s.generation == id.generation())
    }

    pub fn remove(&mut self, id: GangId) {
        if let Some(s) = self.get_mut(id) {
            s.queued = false;
            self.free.push(id.index() as u32);
        }
    }

    /// Bytes held by the slab.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<GangSlot>() + self.free.capacity() * 4
    }
}
