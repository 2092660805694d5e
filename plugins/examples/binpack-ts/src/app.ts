// The component's entry module: its exports are the world's functions
// (world `placement-gpu`: `place` and `place-gpu`).
import { exportPlacement, exportPlacementGpu } from '@paceline/plugin-sdk';
import { binpack } from './binpack.ts';

export const place = exportPlacement(binpack);
export const placeGpu = exportPlacementGpu(binpack);
