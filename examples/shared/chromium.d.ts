/** Chromium's launch flags (see chromium.js). */
export declare const CHROMIUM_ARGS: readonly string[];
