// The component's entry module: its exports are the world's functions.
import { exportPreemption } from '@paceline/plugin-sdk';
import { priorityPreempt } from './priority-preempt.ts';

export const selectVictims = exportPreemption(priorityPreempt);
