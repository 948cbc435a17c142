// Drives a running Sluice gateway with the official OpenAI Node SDK.
//
// Called by tests/openai_sdk.rs with the gateway's base URL and key in SLUICE_BASE_URL and
// SLUICE_KEY, against the built-in echo backend. Each check throws on failure; the script
// prints one line per check and exits non-zero on the first failure. Name checks on the
// command line to run only those.

import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';

const client = new OpenAI({
  baseURL: process.env.SLUICE_BASE_URL,
  apiKey: process.env.SLUICE_KEY,
  maxRetries: 0,
});

async function checkEmbeddings() {
  // Unless told otherwise the SDK asks for base64 and decodes it to numbers itself.
  const result = await client.embeddings.create({
    model: 'echo-embeddings',
    input: ['alpha', 'beta', 'alpha'],
  });
  const vectors = result.data.map((item) => item.embedding);
  assert.deepEqual(result.data.map((item) => item.index), [0, 1, 2]);
  assert.equal(vectors[0].length, 8);
  assert.ok(vectors[0].every((x) => typeof x === 'number'), 'decoded to numbers');
  assert.deepEqual(vectors[0], vectors[2], 'the same text, the same vector');
  assert.notDeepEqual(vectors[0], vectors[1]);
  const norm = vectors[1].reduce((sum, x) => sum + x * x, 0);
  assert.ok(Math.abs(norm - 1) < 1e-5, `a unit vector: ${norm}`);
  const floats = await client.embeddings.create({
    model: 'echo-embeddings',
    input: 'alpha',
    encoding_format: 'float',
  });
  floats.data[0].embedding.forEach((x, i) => assert.ok(Math.abs(x - vectors[0][i]) < 1e-6));
}

async function checkCompletion() {
  const completion = await client.completions.create({
    model: 'echo-completions',
    prompt: 'hello from node',
  });
  assert.equal(completion.object, 'text_completion');
  assert.equal(completion.choices[0].text, 'hello from node');
  assert.equal(completion.usage.completion_tokens, 3);
}

async function checkCompletionStream() {
  const stream = await client.completions.create({
    model: 'echo-completions',
    prompt: 'one two three',
    stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, 'one two three');
  assert.equal(finish, 'stop');
}

async function checkResponses() {
  const created = await client.responses.create({
    model: 'echo-responses',
    input: 'hello node responses',
  });
  assert.equal(created.status, 'completed');
  assert.equal(created.output_text, 'hello node responses');
  assert.equal(created.usage.output_tokens, 3);
  // The gateway gave this ID; it finds the upstream that stored the response.
  const retrieved = await client.responses.retrieve(created.id);
  assert.equal(retrieved.id, created.id);
  assert.equal(retrieved.output_text, 'hello node responses');
}

async function checkResponsesStream() {
  const stream = await client.responses.create({
    model: 'echo-responses',
    input: 'streamed to node',
    stream: true,
  });
  const events = [];
  for await (const event of stream) {
    events.push(event);
  }
  assert.equal(events[0].type, 'response.created');
  assert.equal(events.at(-1).type, 'response.completed');
  const text = events
    .filter((event) => event.type === 'response.output_text.delta')
    .map((event) => event.delta)
    .join('');
  assert.equal(text, 'streamed to node');
  const completed = events.at(-1).response;
  assert.equal(completed.id, events[0].response.id, 'one ID across the stream');
  assert.equal(completed.usage.output_tokens, 3);
  const retrieved = await client.responses.retrieve(completed.id);
  assert.equal(retrieved.output_text, 'streamed to node');
}

async function checkTranscription() {
  // A multipart upload; the SDK puts the model field after the file.
  const audio = Buffer.alloc(48_000, 7);
  const transcription = await client.audio.transcriptions.create({
    file: await toFile(audio, 'speech.wav', { type: 'audio/wav' }),
    model: 'echo-transcription',
  });
  assert.match(transcription.text, /48000 bytes/);
}

const checks = {
  checkEmbeddings,
  checkCompletion,
  checkCompletionStream,
  checkResponses,
  checkResponsesStream,
  checkTranscription,
};

const only = process.argv.slice(2);
const unknown = only.filter((name) => !(name in checks));
assert.deepEqual(unknown, [], 'every named check exists');
for (const [name, check] of Object.entries(checks)) {
  if (only.length > 0 && !only.includes(name)) {
    continue;
  }
  await check();
  console.log(`ok ${name}`);
}
