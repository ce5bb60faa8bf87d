'use strict';
// Drives ali-ons -- a real, third-party RocketMQ remoting client -- against the sidecar's replay
// endpoint for tests/remoting. Usage: node consume.js '<JSON options>'. Prints one JSON line per
// consumed message on stdout, then {"done": ...}. Options: nameSrv, group, topic, tags,
// consumeFromWhere, consumeTimestamp (yyyyMMddHHmmss, UTC), expect (messages), settleMs (keep
// running after the last message), maxMs, pullBatchSize, accessKey, secretKey, stopAfter (consume
// that many, then take no more: later messages are neither handled nor committed).
const { Consumer } = require('ali-ons');

const opts = JSON.parse(process.argv[2]);
const quiet = { info() {}, debug() {}, warn() {}, error(e) { process.stderr.write(`ali-ons: ${e && e.message || e}\n`); } };

async function main() {
  const consumer = new Consumer({
    httpclient: {},
    logger: quiet,
    nameSrv: opts.nameSrv,
    consumerGroup: opts.group,
    consumeFromWhere: opts.consumeFromWhere || 'CONSUME_FROM_LAST_OFFSET',
    consumeTimestamp: opts.consumeTimestamp,
    instanceName: `replay-${process.pid}`,
    pullBatchSize: opts.pullBatchSize || 32,
    accessKey: opts.accessKey,
    secretKey: opts.secretKey,
  });
  const errors = [];
  consumer.on('error', err => { errors.push(err.message); });
  let count = 0;
  let last = Date.now();
  const started = Date.now();
  consumer.subscribe(opts.topic, opts.tags || '*', async msg => {
    if (opts.stopAfter && count >= opts.stopAfter) {
      await new Promise(() => {}); // never handled, never committed
    }
    count += 1;
    last = Date.now();
    process.stdout.write(JSON.stringify({
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      keys: msg.keys,
      tags: msg.tags,
      body: msg.body.toString('base64'),
    }) + '\n');
  });
  await consumer.ready();
  const expect = opts.expect || 0;
  const settle = opts.settleMs || 1000;
  const maxMs = opts.maxMs || 120000;
  for (;;) {
    await new Promise(resolve => setTimeout(resolve, 100));
    const now = Date.now();
    if (count >= expect && now - last >= settle && now - started >= settle) break;
    if (now - started > maxMs) break;
  }
  await consumer.close();
  process.stdout.write(JSON.stringify({ done: true, count, errors }) + '\n');
  process.exit(0);
}

main().catch(err => {
  process.stderr.write(`consume.js failed: ${err.stack || err}\n`);
  process.exit(1);
});
