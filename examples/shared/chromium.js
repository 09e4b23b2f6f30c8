/**
 * How reckon's examples and its console tests launch Debian's Chromium through playwright-core:
 * headless, no sandbox (containers), and no traffic of its own beyond the page under test.
 */
export const CHROMIUM_ARGS = Object.freeze([
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]);
