// Checks a Microsoft Teams workflow webhook body (read from stdin) with the
// Adaptive Cards JavaScript SDK, the renderer of Teams on the web: the
// message envelope Teams' "post to a channel when a webhook request is
// received" workflow takes, then the card as the SDK parses it. Prints a
// JSON report; exits 1 when anything is wrong.
//   node check-card.js <path to adaptivecards.js> < body.json
"use strict";
const AC = require(process.argv[2]);
const body = JSON.parse(require("fs").readFileSync(0, "utf8"));
const problems = [];
// Teams renders cards up to schema 1.5 (1.4 on mobile clients).
const TEAMS_VERSION = 1.4;

if (body.type !== "message") problems.push(`type is ${JSON.stringify(body.type)}, not "message"`);
const atts = Array.isArray(body.attachments) ? body.attachments : [];
if (atts.length !== 1) problems.push(`${atts.length} attachments, not 1`);
const att = atts[0] || {};
if (att.contentType !== "application/vnd.microsoft.card.adaptive")
  problems.push(`contentType is ${JSON.stringify(att.contentType)}`);
const content = att.content || {};
if (content.type !== "AdaptiveCard") problems.push("content is not an AdaptiveCard");
if (!(parseFloat(content.version) <= TEAMS_VERSION))
  problems.push(`card version ${content.version} is above ${TEAMS_VERSION}`);

const card = new AC.AdaptiveCard();
const ctx = new AC.SerializationContext();
ctx.targetVersion = AC.Versions.v1_4;
card.parse(content, ctx);
for (let i = 0; i < ctx.eventCount; i++) {
  const e = ctx.getEventAt(i);
  problems.push(`parse: ${e.message}`);
}
for (const e of card.validateProperties().validationEvents) {
  problems.push(`validate: ${e.message}`);
}
// Every property written is one the SDK knows: what it writes back is
// what it was given.
const canonical = (v) =>
  Array.isArray(v)
    ? v.map(canonical)
    : v && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]))
      : v;
const given = JSON.stringify(canonical(content));
const back = JSON.stringify(canonical(card.toJSON()));
if (given !== back) problems.push(`the SDK writes back ${back}, not ${given}`);

const texts = [];
card.getAllElements?.().forEach?.((e) => e.text && texts.push(e.text));
console.log(JSON.stringify({ problems, elements: card.getItemCount(), texts }));
process.exit(problems.length ? 1 : 0);
