/**
 * A deliberately broken build, for one test only: test/reliability/broken-build.test.ts turns a
 * safeguard off in worker child processes and shows that the chaos harness then reports the
 * duplicate. A harness that passes a build without its safeguards would prove nothing.
 *
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=dispatch-fence   a worker that lost its lease dispatches
 *                                                    anyway: the store's refusal of its dispatch
 *                                                    marker and the lease-loss abort of ctx.signal
 *                                                    (the local half of the same fence) are ignored
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=unknown-retry    an UNKNOWN outcome is taken for a retryable
 *                                                    failure: the request is sent again blindly
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=lookup-before-horizon   the reconciler looks up an UNKNOWN job
 *                                                    before dispatchedAt + timeout + grace
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=dedup-ignores-operation   an enqueue whose request key belongs
 *                                                    to another operation's job is deduplicated
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=marker-after-dispatch   the side effect starts before its
 *                                                    dispatch marker is written (invariant 3)
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=unfenced-outcome a worker fenced out of its attempt writes its
 *                                                    outcome to the job anyway (invariant 7)
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=new-key-on-retry a retry sends a fresh request key
 *                                                    (invariant 6)
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=same-key-resend  the reconciler resends every UNKNOWN request
 *                                                    with its key, as if every downstream
 *                                                    deduplicated by it (invariant 5)
 *   RECKON_UNSAFE_DISABLE_SAFEGUARD=restore-keeps-approvals   a restore from a backup leaves
 *                                                    jobs awaiting approval waiting (issue #33.2,
 *                                                    before its fix), though a person may have
 *                                                    decided them on the old host after the backup
 *
 * Read once, when this module loads. Honoured only when NODE_ENV=test; anywhere else the variable
 * is ignored with a warning on stderr, so a stray setting can never weaken a real deployment.
 *
 * It lives in core (the one module there that reads the environment) because both the runtime
 * and the stores have safeguards a test may switch off, and neither may import the other.
 */
export const SAFEGUARDS = [
  'dispatch-fence',
  'unknown-retry',
  'lookup-before-horizon',
  'dedup-ignores-operation',
  'marker-after-dispatch',
  'unfenced-outcome',
  'new-key-on-retry',
  'same-key-resend',
  'restore-keeps-approvals',
] as const;
export type Safeguard = (typeof SAFEGUARDS)[number];

export function disabledSafeguardFrom(env: NodeJS.ProcessEnv): Safeguard | null {
  const value = env.RECKON_UNSAFE_DISABLE_SAFEGUARD;
  if (!value) return null;
  if (env.NODE_ENV !== 'test') {
    process.stderr.write(
      `reckon: RECKON_UNSAFE_DISABLE_SAFEGUARD=${value} ignored: honoured only when NODE_ENV=test\n`,
    );
    return null;
  }
  if (!(SAFEGUARDS as readonly string[]).includes(value))
    throw new Error(
      `RECKON_UNSAFE_DISABLE_SAFEGUARD: unknown safeguard ${value}; known: ${SAFEGUARDS.join(', ')}`,
    );
  return value as Safeguard;
}

/** The one safeguard this process runs without, or null (always null outside NODE_ENV=test). */
export const DISABLED_SAFEGUARD: Safeguard | null = disabledSafeguardFrom(process.env);
