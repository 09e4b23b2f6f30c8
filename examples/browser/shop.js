/**
 * Stands in for a website an agent acts on: a small shop on loopback that knows nothing about
 * reckon. `GET /` is a form that places an order; `POST /orders` places one on EVERY submission
 * (a second click is a second order, as on most real sites); `GET /orders` lists the orders.
 *
 * The form has a hidden `request_key` field that the shop stores with the order and shows in
 * the list: that is how the agent finds out later whether its click placed an order. Real sites
 * offer the same through an order reference, a note field or a client-chosen id.
 *
 * `submissionsOf(key)` is the business truth the example is judged by: exactly one per key.
 */
import { createServer } from 'node:http';
import { URL, URLSearchParams } from 'node:url';

const escapeHtml = (s) =>
  String(s).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c],
  );

const page = (title, body) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>` +
  `</head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`;

const FORM = page(
  'Place an order',
  `<form method="post" action="/orders">
     <label>Item <input name="item" required></label>
     <label>Quantity <input name="quantity" type="number" min="1" value="1" required></label>
     <input type="hidden" name="request_key" value="">
     <button type="submit">Place order</button>
   </form>`,
);

export async function startShop() {
  /** @type {Array<{ id: number; item: string; quantity: number; requestKey: string }>} */
  const orders = [];
  /** @type {Map<string, number>} */
  const submissions = new Map();
  const server = createServer((req, res) => {
    const html = (status, body, headers = {}) => {
      res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', ...headers });
      res.end(body);
    };
    const url = new URL(req.url ?? '/', 'http://shop');
    if (req.method === 'GET' && url.pathname === '/') return html(200, FORM);
    if (req.method === 'GET' && url.pathname === '/orders') {
      const rows = orders
        .map(
          (o) =>
            `<tr data-order-id="${o.id}" data-request-key="${escapeHtml(o.requestKey)}">` +
            `<td>${o.id}</td><td>${escapeHtml(o.item)}</td><td>${o.quantity}</td>` +
            `<td>${escapeHtml(o.requestKey)}</td></tr>`,
        )
        .join('');
      return html(
        200,
        page(
          'Orders',
          `<table><tr><th>#</th><th>item</th><th>qty</th><th>ref</th></tr>${rows}</table>`,
        ),
      );
    }
    const placed = /^\/orders\/(\d+)$/.exec(url.pathname);
    if (req.method === 'GET' && placed) {
      const order = orders.find((o) => o.id === Number(placed[1]));
      if (!order) return html(404, page('No such order', ''));
      return html(200, page('Order placed', `<p>Order <span id="order-id">${order.id}</span></p>`));
    }
    if (req.method !== 'POST' || url.pathname !== '/orders')
      return html(404, page('Not found', ''));
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const form = new URLSearchParams(body);
      const requestKey = form.get('request_key') ?? '';
      submissions.set(requestKey, (submissions.get(requestKey) ?? 0) + 1);
      const order = {
        id: orders.length + 1,
        item: form.get('item') ?? '',
        quantity: Number(form.get('quantity') ?? 1),
        requestKey,
      };
      orders.push(order);
      html(303, '', { location: `/orders/${order.id}` });
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${port}`,
    /** How many times the form was submitted with this request key. */
    submissionsOf: (key) => submissions.get(key) ?? 0,
    orders: () => [...orders],
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve(undefined));
      }),
  };
}
