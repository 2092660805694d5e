// The component's entry module: its exports are the world's functions.
import { exportPlacement } from '@paceline/plugin-sdk';
import { binpack } from './binpack.ts';

export const place = exportPlacement(binpack);
