/**
 * The side effect of the agent example: send one email. Two parts, used by the example and by
 * reckon's own tests alike:
 *
 *  - `sendEmail` (and `sendEmailWithApproval`, the same behind a person's approval): reckon
 *    operations that send through SMTP with the request key in an `X-Reckon-Request-Key`
 *    header, and whose `lookup` asks the mailbox whether a message with that key arrived;
 *  - `startMailbox()`: an SMTP server on loopback (smtp-server) that keeps what it receives and
 *    answers "which messages carry this key?" over HTTP, as a real provider's API would.
 *
 * Where the mailbox is comes from the environment, read when the operation runs, so a worker
 * process started with `reckon work --operations examples/agent/email.js` finds it:
 * MAILBOX_SMTP_PORT and MAILBOX_URL. EMAIL_TIMEOUT_MS and EMAIL_GRACE_MS shorten the wait
 * before a lookup (tests).
 */
/* global fetch, Buffer, URL */
import { createServer } from 'node:http';
import process from 'node:process';
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';
import { z } from 'zod';
import { defineOperation } from 'reckon';

export const KEY_HEADER = 'x-reckon-request-key';

const emailInput = z.object({
  to: z.email().describe('recipient address'),
  subject: z.string().min(1).max(200),
  body: z.string().max(20_000),
});

function mailboxEnv() {
  const port = Number(process.env.MAILBOX_SMTP_PORT);
  const url = process.env.MAILBOX_URL;
  if (!Number.isInteger(port) || !url)
    throw new Error('set MAILBOX_SMTP_PORT and MAILBOX_URL (see startMailbox)');
  return { port, url };
}

/** @param {{ name: string; approval?: boolean }} p */
function emailOperation({ name, approval }) {
  return defineOperation({
    name,
    description: 'Send one email. Returns the message id once the mail server accepted it.',
    input: emailInput,
    destructive: true,
    ...(approval ? { approval: (input) => `email to ${input.to}: ${input.subject}` } : {}),
    timeoutMs: Number(process.env.EMAIL_TIMEOUT_MS ?? 30_000),
    reconcile: { graceMs: Number(process.env.EMAIL_GRACE_MS ?? 5_000), lookupBackoffMs: 200 },
    async lookup(requestKey, _input, ctx) {
      const res = await fetch(
        `${mailboxEnv().url}/messages?key=${encodeURIComponent(requestKey)}`,
        {
          signal: ctx.signal,
        },
      );
      if (!res.ok) throw new Error(`mailbox answered HTTP ${res.status}`); // inconclusive
      const { messages } = await res.json();
      if (messages.length === 0) return { found: false };
      return { found: true, outcome: 'succeeded', result: { messageId: messages[0].messageId } };
    },
    async execute(input, ctx) {
      const { port } = mailboxEnv();
      const transport = nodemailer.createTransport({
        host: '127.0.0.1',
        port,
        secure: false,
        ignoreTLS: true,
      });
      try {
        return await ctx.dispatch(async () => {
          const info = await transport.sendMail({
            from: 'agent@example.test',
            to: input.to,
            subject: input.subject,
            text: input.body,
            headers: { [KEY_HEADER]: ctx.requestKey },
          });
          return { messageId: info.messageId };
        });
      } finally {
        transport.close();
      }
    },
  });
}

export const sendEmail = emailOperation({ name: 'email.send' });
export const sendEmailWithApproval = emailOperation({
  name: 'email.send-approved',
  approval: true,
});

/**
 * @typedef {{ key: string | null; messageId: string | null; to: string[]; subject: string;
 *   raw: string }} Received
 */

/**
 * Starts the mailbox on loopback. `onMessage` sees each message as it arrives, before the SMTP
 * server acknowledges it. Close it with `close()`.
 * @param {{ onMessage?: (m: Received) => void }} [options]
 */
export async function startMailbox(options = {}) {
  /** @type {Received[]} */
  const received = [];
  const smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks = [];
      stream.on('data', (c) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const headers = parseHeaders(raw);
        const message = {
          key: headers.get(KEY_HEADER) ?? null,
          messageId: headers.get('message-id') ?? null,
          to: session.envelope.rcptTo.map((r) => r.address),
          subject: headers.get('subject') ?? '',
          raw,
        };
        received.push(message);
        options.onMessage?.(message);
        callback();
      });
    },
  });
  await new Promise((resolve, reject) => {
    smtp.once('error', reject);
    smtp.listen(0, '127.0.0.1', () => resolve(undefined));
  });
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://mailbox');
    const key = url.searchParams.get('key');
    const messages = received
      .filter((m) => key === null || m.key === key)
      .map(({ key: k, messageId, to, subject }) => ({ key: k, messageId, to, subject }));
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ messages }));
  });
  await new Promise((resolve) => http.listen(0, '127.0.0.1', () => resolve(undefined)));
  const smtpPort = /** @type {import('node:net').AddressInfo} */ (smtp.server.address()).port;
  const httpPort = /** @type {import('node:net').AddressInfo} */ (http.address()).port;
  return {
    smtpPort,
    url: `http://127.0.0.1:${httpPort}`,
    /** The environment a worker needs to reach this mailbox. */
    env: { MAILBOX_SMTP_PORT: String(smtpPort), MAILBOX_URL: `http://127.0.0.1:${httpPort}` },
    messages: () => [...received],
    /** @param {string} key */
    withKey: (key) => received.filter((m) => m.key === key),
    close: async () => {
      http.closeAllConnections();
      await Promise.all([
        new Promise((resolve) => smtp.close(() => resolve(undefined))),
        new Promise((resolve) => http.close(() => resolve(undefined))),
      ]);
    },
  };
}

/** The top-level header fields of a raw message, names lower-cased, folded lines joined. */
function parseHeaders(raw) {
  const end = raw.indexOf('\r\n\r\n');
  const head = (end === -1 ? raw : raw.slice(0, end)).replace(/\r\n[ \t]+/g, ' ');
  const headers = new Map();
  for (const line of head.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0)
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return headers;
}
