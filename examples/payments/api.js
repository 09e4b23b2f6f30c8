/**
 * Stands in for a payment provider: an HTTP API on loopback with `Idempotency-Key` semantics, as
 * Stripe and most providers document them.
 *
 *   POST /charges  {customer, amountCents, card}   with header Idempotency-Key: K
 *     first time for K:            charges (201), or declines the card (402); the answer is kept
 *     again for K, same body:      the kept answer again (no second charge), Idempotent-Replayed: true
 *     again for K, different body: 422: a key names one request
 *   GET /charges?key=K             the charge made under K (200), or 404 when none was
 *
 * Its ledger (charges per key, requests per key) is the business truth the example is judged
 * by. `lookupDown(true)` makes GET answer 503, as an API whose read side is having a bad day.
 */
import { createServer } from 'node:http';
import { URL } from 'node:url';

/** This card number is always declined: a definite answer, never worth retrying. */
export const DECLINED_CARD = '4000000000000002';

export async function startPaymentsApi() {
  /** @type {Map<string, { body: string; status: number; answer: object }>} */
  const byKey = new Map();
  /** @type {Map<string, number>} */
  const requests = new Map();
  let lookupDown = false;
  let seq = 0;
  const server = createServer((req, res) => {
    const reply = (status, body, headers = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    const url = new URL(req.url ?? '/', 'http://payments');
    if (req.method === 'GET' && url.pathname === '/charges') {
      if (lookupDown) return reply(503, { error: 'lookup unavailable' });
      const kept = byKey.get(url.searchParams.get('key') ?? '');
      return kept ? reply(kept.status, kept.answer) : reply(404, { error: 'no such charge' });
    }
    if (req.method !== 'POST' || url.pathname !== '/charges') return reply(404, {});
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      if (typeof key !== 'string' || key === '')
        return reply(400, { error: 'Idempotency-Key header required' });
      requests.set(key, (requests.get(key) ?? 0) + 1);
      const kept = byKey.get(key);
      if (kept && kept.body !== body)
        return reply(422, { error: 'this Idempotency-Key was used with another request body' });
      if (kept) return reply(kept.status, kept.answer, { 'idempotent-replayed': 'true' });
      const input = JSON.parse(body);
      const declined = input.card === DECLINED_CARD;
      const answer = declined
        ? { key, paid: false, error: 'card_declined' }
        : { key, paid: true, id: `ch_${++seq}`, amountCents: input.amountCents };
      const status = declined ? 402 : 201;
      byKey.set(key, { body, status, answer });
      reply(status, answer);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const url = `http://127.0.0.1:${/** @type {import('node:net').AddressInfo} */ (server.address()).port}`;
  return {
    url,
    /** How many charges were made under `key` (0 or 1: the API itself never charges twice). */
    chargesOf: (key) => (byKey.get(key)?.answer.paid ? 1 : 0),
    /** How many charges were made in all, under any key. */
    totalCharges: () => [...byKey.values()].filter((k) => k.answer.paid).length,
    /** How many POSTs arrived with this key. */
    requestsOf: (key) => requests.get(key) ?? 0,
    /** @param {boolean} down */
    lookupDown: (down) => void (lookupDown = down),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve(undefined));
      }),
  };
}
