// The component's entry module: its exports are the world's functions
// (world `preemption-gpu`: `select-victims` and `select-victims-gpu`).
import { exportPreemption, exportPreemptionGpu } from '@paceline/plugin-sdk';
import { priorityPreempt } from './priority-preempt.ts';

export const selectVictims = exportPreemption(priorityPreempt);
export const selectVictimsGpu = exportPreemptionGpu(priorityPreempt);
