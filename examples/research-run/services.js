/**
 * Stands in for what a research agent's three steps touch, on loopback: a search API (read
 * only), a documents service that stores drafts, and an outbox that sends them. Each POST is
 * counted per request key (`x-request-key`), the business truth the example is judged by;
 * drafts and sent messages can be looked up by key (`GET /drafts?key=`, `GET /outbox?key=`).
 */
import { createServer } from 'node:http';
import { URL } from 'node:url';

export async function startResearchServices() {
  /** @type {Map<string, number>} "path key" -> POSTs received */
  const posts = new Map();
  /** @type {Map<string, Map<string, object>>} path -> key -> what was made */
  const made = new Map([
    ['/drafts', new Map()],
    ['/outbox', new Map()],
  ]);
  let seq = 0;
  const server = createServer((req, res) => {
    const reply = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const url = new URL(req.url ?? '/', 'http://services');
    if (req.method === 'GET' && made.has(url.pathname)) {
      const found = made.get(url.pathname).get(url.searchParams.get('key') ?? '');
      return found ? reply(200, found) : reply(404, { error: 'not found' });
    }
    if (req.method !== 'POST') return reply(404, {});
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const key = String(req.headers['x-request-key'] ?? '');
      posts.set(`${url.pathname} ${key}`, (posts.get(`${url.pathname} ${key}`) ?? 0) + 1);
      const input = JSON.parse(body);
      if (url.pathname === '/search')
        return reply(200, {
          sources: [1, 2, 3].map((n) => ({
            title: `${input.topic}, part ${n}`,
            url: `https://example.test/${n}`,
          })),
        });
      if (url.pathname === '/drafts') {
        const draft = {
          key,
          draftId: `d_${++seq}`,
          text: `On ${input.topic}: ${input.sources.map((s) => s.title).join('; ')}`,
        };
        made.get('/drafts').set(key, draft);
        return reply(201, draft);
      }
      if (url.pathname === '/outbox') {
        const sent = { key, messageId: `m_${++seq}`, to: input.to, draftId: input.draftId };
        made.get('/outbox').set(key, sent);
        return reply(201, sent);
      }
      reply(404, {});
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${port}`,
    /** POSTs received on `path` ('/search', '/drafts', '/outbox') with this request key. */
    postsOf: (path, key) => posts.get(`${path} ${key}`) ?? 0,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve(undefined));
      }),
  };
}
