/**
 * A line of replica output as a terminal shows it, rendered with JupyterLab's own colours.
 *
 * Training code redraws a line with carriage returns (tqdm, Keras) and colours it with SGR
 * codes. `visibleLine` gives what a terminal shows of such a line: `\r` returns to its start
 * and later characters overwrite earlier ones, `\b` steps back, erase-to-end (`ESC [ K`) cuts
 * it at the cursor, SGR codes stay with the characters they style, and every other control
 * sequence (cursor movement, titles, clipboard writes, hyperlinks) or character is dropped.
 * The same rules as the server's distrun.core.terminal. Lines are stored as written; this is
 * only how they are shown, searched and read for metrics.
 *
 * `appendAnsi` renders the visible line as spans, parsed by `anser` (a well-kept ANSI parser),
 * with JupyterLab's own ANSI classes, so colours look as in its cell outputs in every theme
 * (the container needs `jp-RenderedText` and a `pre`, which those classes are scoped to).
 */

/* eslint-disable no-control-regex -- matching control characters is this module's job */

import Anser from 'anser';

const ESCAPE = new RegExp(
  [
    '(?:\\x1b\\[|\\x9b)([0-?]*)[ -/]*([@-~])', // CSI ... final byte
    '(?:\\x1b\\]|\\x9d)[^\\x07\\x1b\\x9c]*(?:\\x07|\\x1b\\\\|\\x9c)?', // OSC ... BEL or ST
    '\\x1b[PX^_][^\\x1b]*(?:\\x1b\\\\)?', // DCS, SOS, PM, APC strings
    '\\x1b[ -/]*[0-~]?', // any other escape
    '[\\x00-\\x08\\x0b-\\x1f\\x7f\\x80-\\x9f]' // other controls (not \t, \n)
  ].join('|'),
  'g'
);
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/;
// An escape sequence cut off by the end of the text (an unfinished line is shown mid-write).
const UNFINISHED_ESCAPE =
  /(?:\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?|\x9b[0-?]*[ -/]*)$/;
const SGR_PARAMS = /^[0-9;:]*$/;
const SGR = /\x1b\[[0-9;:]*m/g;
const RESET = '\x1b[0m';

/** `raw` as a terminal shows it; only SGR codes remain of its control sequences. */
export function visibleLine(raw: string): string {
  if (!CONTROL.test(raw)) {
    return raw; // most lines: nothing to do
  }
  const text = raw.replace(UNFINISHED_ESCAPE, '');
  const cells: [style: string, char: string][] = [];
  let style = '';
  let column = 0;
  let position = 0;
  const write = (chars: string): void => {
    const added = Array.from(chars, (char): [string, string] => [style, char]);
    cells.splice(column, added.length, ...added);
    column += added.length;
  };
  ESCAPE.lastIndex = 0;
  for (let match = ESCAPE.exec(text); match; match = ESCAPE.exec(text)) {
    write(text.slice(position, match.index));
    position = ESCAPE.lastIndex;
    const token = match[0];
    const [params, final] = [match[1], match[2]];
    if (token === '\r') {
      column = 0;
    } else if (token === '\b') {
      column = Math.max(0, column - 1);
    } else if (
      final === 'm' &&
      params !== undefined &&
      SGR_PARAMS.test(params)
    ) {
      style = params === '' || params === '0' ? '' : `${style}\x1b[${params}m`;
    } else if (final === 'K' && (params === '' || params === '0')) {
      cells.length = column;
    }
  }
  write(text.slice(position));
  return render(cells);
}

function render(cells: [string, string][]): string {
  let out = '';
  let current = '';
  for (const [style, char] of cells) {
    if (style !== current) {
      out += current ? RESET + style : style;
      current = style;
    }
    out += char;
  }
  return current ? out + RESET : out;
}

/** What a reader sees of `raw`, without colours: for search, filters and metrics. */
export function plainText(raw: string): string {
  return CONTROL.test(raw) ? visibleLine(raw).replace(SGR, '') : raw;
}

/** Appends `raw`, as a terminal shows it, to `node`: text, or styled spans. */
export function appendAnsi(node: HTMLElement, raw: string): void {
  if (!CONTROL.test(raw)) {
    node.append(raw);
    return;
  }
  const entries = Anser.ansiToJson(visibleLine(raw), {
    use_classes: true,
    remove_empty: true
  });
  for (const entry of entries) {
    const styled = styleOf(entry);
    if (!styled) {
      node.append(entry.content);
      continue;
    }
    const span = document.createElement('span');
    span.className = styled.classes.join(' ');
    span.style.cssText = styled.css;
    span.textContent = entry.content;
    node.append(span);
  }
}

interface IStyle {
  classes: string[];
  css: string;
}

function styleOf(entry: Anser.AnserJsonEntry): IStyle | null {
  const classes: string[] = [];
  const css: string[] = [];
  colour(entry.fg, entry.fg_truecolor, 'fg', 'color', classes, css);
  colour(entry.bg, entry.bg_truecolor, 'bg', 'background-color', classes, css);
  for (const decoration of entry.decorations) {
    if (decoration === 'bold' || decoration === 'underline') {
      classes.push(`ansi-${decoration}`);
    } else if (decoration === 'italic') {
      css.push('font-style: italic');
    } else if (decoration === 'dim') {
      css.push('opacity: 0.7');
    } else if (decoration === 'strikethrough') {
      css.push('text-decoration: line-through');
    } else if (decoration === 'reverse' && !entry.fg && !entry.bg) {
      classes.push('ansi-default-inverse-fg', 'ansi-default-inverse-bg');
    }
  }
  return classes.length || css.length ? { classes, css: css.join('; ') } : null;
}

const NAMES = [
  'black',
  'red',
  'green',
  'yellow',
  'blue',
  'magenta',
  'cyan',
  'white'
];

/** anser's colour -> JupyterLab's ANSI class (16 colours) or an inline colour (256, true). */
function colour(
  name: string | null,
  truecolor: string | null,
  layer: 'fg' | 'bg',
  property: string,
  classes: string[],
  css: string[]
): void {
  if (!name) {
    return;
  }
  const named = /^ansi-(bright-)?([a-z]+)$/.exec(name);
  if (named && NAMES.includes(named[2])) {
    classes.push(`ansi-${named[2]}${named[1] ? '-intense' : ''}-${layer}`);
    return;
  }
  const palette = /^ansi-palette-(\d+)$/.exec(name);
  if (palette) {
    const index = Number(palette[1]);
    if (index < 16) {
      const intense = index >= 8 ? '-intense' : '';
      classes.push(`ansi-${NAMES[index % 8]}${intense}-${layer}`);
    } else {
      css.push(`${property}: ${paletteRgb(index)}`);
    }
    return;
  }
  if (name === 'ansi-truecolor' && truecolor) {
    css.push(`${property}: rgb(${truecolor})`);
  }
}

/** The xterm 256-colour palette beyond the 16 named colours. */
export function paletteRgb(index: number): string {
  if (index >= 232) {
    const level = 8 + (index - 232) * 10;
    return `rgb(${level}, ${level}, ${level})`;
  }
  const cube = index - 16;
  const step = (value: number): number => (value === 0 ? 0 : 55 + value * 40);
  const [r, g, b] = [Math.floor(cube / 36), Math.floor(cube / 6) % 6, cube % 6];
  return `rgb(${step(r)}, ${step(g)}, ${step(b)})`;
}
