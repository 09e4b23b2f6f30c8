/** Registers what a test must undo after it (the test runs them last first). */
export type Cleanup = (undo: () => unknown) => void;
