// Small helpers to build the page: h() makes an element, text() a node.

// h('div.card#id', {attrs}, ...children): a tag with optional classes and
// id, attributes (on* are listeners, dataset keys go to data-*), children
// (strings, nodes, arrays, null).
export function h(spec, attrs, ...children) {
  const [, tag, rest] = spec.match(/^([a-z0-9]+)(.*)$/i);
  const el = document.createElementNS(svgTags.has(tag) ? SVG : HTML, tag);
  for (const part of rest.match(/[.#][^.#]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

const HTML = 'http://www.w3.org/1999/xhtml';
const SVG = 'http://www.w3.org/2000/svg';
const svgTags = new Set(['svg', 'line', 'circle', 'text', 'tspan', 'path', 'defs', 'marker', 'g', 'title']);

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// json renders a value as compact JSON, shortened to max characters.
export function json(v, max = 80) {
  const s = v === undefined ? '' : JSON.stringify(v);
  return s.length > max ? s.slice(0, max) + '…' : s;
}

// ago says how long before now a time was, briefly.
export function clock(t) {
  const d = new Date(t);
  return d.toLocaleTimeString([], { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
}

export function badge(text, cls = text) {
  return h('span.badge', { class: 'badge ' + cls }, text);
}

export function empty(text) {
  return h('div.empty', text);
}
