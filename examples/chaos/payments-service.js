/**
 * Stands in for YOUR downstream: a tiny payments service on loopback that charges once per
 * request key it has not seen (it does not deduplicate: a second POST is a second charge),
 * answers `GET /charges/:key`, and loses the answer to one charge in eight after committing it.
 * Its ledger of charges per key is the business truth the chaos run is judged by.
 */
import { createServer } from 'node:http';
import { setTimeout } from 'node:timers';

export async function startPaymentsService() {
  const charges = new Map(); // request key -> number of charges committed
  let posts = 0;
  const server = createServer((req, res) => {
    const reply = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url.startsWith('/charges/')) {
      const key = decodeURIComponent(req.url.slice('/charges/'.length));
      return charges.has(key) ? reply(200, { key, charged: true }) : reply(404, { found: false });
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const { key, amountCents } = JSON.parse(body);
      // A little slow, like a real service: workers die with requests in flight.
      setTimeout(() => {
        charges.set(key, (charges.get(key) ?? 0) + 1);
        // The worst case for a client: the charge happened, the answer is lost.
        if (++posts % 8 === 0) return res.socket.destroy();
        reply(200, { key, amountCents, charged: true });
      }, 150);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    chargesOf: (key) => charges.get(key) ?? 0,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
