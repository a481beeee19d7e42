/**
 * @jest-environment jsdom
 */
import { appendAnsi, paletteRgb, plainText, visibleLine } from '../ansi';

describe('visibleLine: a line as a terminal shows it', () => {
  it.each([
    ['plain line', 'plain line'],
    ['tab\tstays', 'tab\tstays'],
    ['Epoch 1:  10%|#   |\rEpoch 1:  20%|##  |', 'Epoch 1:  20%|##  |'],
    ['abcdef\rxy', 'xycdef'],
    ['written then\r', 'written then'],
    ['ab\bX', 'aX'],
    ['\b\bstart', 'start'],
    ['hello world\rbye\x1b[K', 'bye'],
    ['\x1b[31mERROR\x1b[0m done', '\x1b[31mERROR\x1b[0m done'],
    ['\x1b[1m\x1b[32mok\x1b[m', '\x1b[1m\x1b[32mok\x1b[0m'],
    ['\x1b[31mred\rR', '\x1b[31mRed\x1b[0m'],
    ['\x1b[31mA\x1b[0mB\rC', 'CB'],
    ['loading 50%\x1b[3', 'loading 50%'], // a code cut off at the end is held back
    ['🙂🙂\r🚀', '🚀🙂']
  ])('%j shows %j', (raw, shown) => {
    expect(visibleLine(raw)).toBe(shown);
  });

  it.each([
    '\x1b]52;c;ZXZpbA==\x07',
    '\x1b]0;owned\x07',
    '\x1b]8;;https://evil.example\x1b\\',
    '\x1b[2J\x1b[H',
    '\x1b[5A\x1b[10C',
    '\x1bP+q544e\x1b\\',
    '\x1b[?1049h',
    '\x07\x00',
    '\x9b2J'
  ])('drops the control sequence %j', hostile => {
    expect(visibleLine(`a${hostile}b`)).toBe('ab');
  });

  it('is what the server computes for a Keras progress bar', () => {
    const keras =
      '\r\x1b[1m1/5\x1b[0m \x1b[32m━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m0s\x1b[0m 60ms/step - loss: 1.0000' +
      '\b'.repeat(60) +
      '\r\x1b[1m5/5\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m0s\x1b[0m 60ms/step - loss: 0.2000';
    expect(plainText(keras)).toBe(
      '5/5 ━━━━━━━━━━━━━━━━━━━━ 0s 60ms/step - loss: 0.2000'
    );
  });
});

describe('appendAnsi: colours with JupyterLab classes', () => {
  function rendered(raw: string): HTMLElement {
    const node = document.createElement('pre');
    appendAnsi(node, raw);
    return node;
  }

  it('leaves a plain line as text', () => {
    const node = rendered('just text');
    expect(node.childElementCount).toBe(0);
    expect(node.textContent).toBe('just text');
  });

  it('renders 16 colours, intense ones and decorations as JupyterLab classes', () => {
    const node = rendered('\x1b[31mERROR\x1b[0m \x1b[1;92mok\x1b[0m');
    const spans = Array.from(node.querySelectorAll('span'));
    expect(spans.map(s => [s.textContent, s.className])).toEqual([
      ['ERROR', 'ansi-red-fg'],
      ['ok', 'ansi-green-intense-fg ansi-bold']
    ]);
    expect(node.textContent).toBe('ERROR ok');
  });

  it('renders 256 and true colours inline', () => {
    const node = rendered(
      '\x1b[38;5;208morange\x1b[0m \x1b[48;2;10;20;30mdark\x1b[0m'
    );
    const [orange, dark] = Array.from(node.querySelectorAll('span'));
    expect(orange.style.color).toBe(paletteRgb(208));
    expect(dark.style.backgroundColor).toBe('rgb(10, 20, 30)');
  });

  it('never shows an escape character', () => {
    const node = rendered('a\x1b]0;title\x07\x1b[2Jb\rc');
    expect(node.textContent).toBe('cb');
  });
});
