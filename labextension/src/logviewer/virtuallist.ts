/**
 * A list that renders only the rows in view, so a million rows cost a few dozen DOM nodes
 * (the arithmetic is in windowing.ts).
 */

import { Widget } from '@lumino/widgets';

import {
  rowAtScroll,
  scrollTopForRow,
  spacerHeight,
  windowAt
} from './windowing';

export interface IVirtualListOptions {
  /** How many rows there are now. */
  rowCount: () => number;
  /** Fills `node` (a reused row element) with row `row`. */
  renderRow: (row: number, node: HTMLElement) => void;
  /** Called after every scroll the user makes, with whether the list is at its end. */
  scrolled?: (atEnd: boolean) => void;
  /** The row height when it cannot be measured (the list is hidden). */
  fallbackRowHeight?: number;
}

export class VirtualList extends Widget {
  constructor(options: IVirtualListOptions) {
    super();
    this._options = options;
    this._rowHeight = options.fallbackRowHeight ?? 18;
    this.addClass('jp-distrun-VirtualList');
    this._spacer.className = 'jp-distrun-VirtualList-spacer';
    this._rows.className = 'jp-distrun-VirtualList-rows';
    this._spacer.append(this._rows);
    this.node.append(this._spacer);
    this.node.addEventListener('scroll', this);
  }

  get rowHeight(): number {
    return this._rowHeight;
  }

  /** The row at the viewport's top. */
  get topRow(): number {
    return Math.floor(
      rowAtScroll(
        this.node.scrollTop,
        this.node.clientHeight,
        this._options.rowCount(),
        this._rowHeight
      )
    );
  }

  /** Whether the last row is in view. */
  get atEnd(): boolean {
    const node = this.node;
    return (
      node.scrollHeight - node.scrollTop - node.clientHeight <
      this._rowHeight / 2
    );
  }

  handleEvent(event: Event): void {
    if (event.type === 'scroll') {
      this.refresh();
      this._options.scrolled?.(this.atEnd);
    }
  }

  /** Re-renders the rows in view (call after rows were added, removed or changed). */
  refresh(): void {
    if (!this.isVisible) {
      return;
    }
    this._measure();
    const rows = this._options.rowCount();
    this._spacer.style.height = `${spacerHeight(rows, this._rowHeight)}px`;
    const window = windowAt(
      this.node.scrollTop,
      this.node.clientHeight,
      rows,
      this._rowHeight
    );
    this._rows.style.transform = `translateY(${window.top}px)`;
    const count = window.last - window.first;
    while (this._rows.childElementCount < count) {
      const row = document.createElement('div');
      row.className = 'jp-distrun-VirtualList-row';
      this._rows.append(row);
    }
    while (this._rows.childElementCount > count) {
      this._rows.lastElementChild!.remove();
    }
    const nodes = this._rows.children;
    for (let i = 0; i < count; i++) {
      const node = nodes[i] as HTMLElement;
      node.dataset.row = String(window.first + i);
      this._options.renderRow(window.first + i, node);
    }
  }

  /** Scrolls so that `row` is in view: at the top, or centred. */
  scrollToRow(row: number, align: 'top' | 'center' = 'center'): void {
    const viewport = this.node.clientHeight;
    const shift = align === 'center' ? viewport / this._rowHeight / 2 - 0.5 : 0;
    this.node.scrollTop = scrollTopForRow(
      row - shift,
      viewport,
      this._options.rowCount(),
      this._rowHeight
    );
    this.refresh();
  }

  scrollToEnd(): void {
    const rows = this._options.rowCount();
    this._spacer.style.height = `${spacerHeight(rows, this._rowHeight)}px`;
    this.node.scrollTop = this.node.scrollHeight;
    this.refresh();
  }

  dispose(): void {
    this.node.removeEventListener('scroll', this);
    super.dispose();
  }

  protected onAfterShow(): void {
    this.refresh();
  }

  protected onResize(): void {
    this.refresh();
  }

  /** Reads the row height from the stylesheet once the list is on screen. */
  private _measure(): void {
    if (this._measured) {
      return;
    }
    const probe = document.createElement('div');
    probe.className = 'jp-distrun-VirtualList-row';
    this._rows.append(probe);
    const height = probe.getBoundingClientRect().height;
    probe.remove();
    if (height > 0) {
      this._rowHeight = height;
      this._measured = true;
    }
  }

  private readonly _options: IVirtualListOptions;
  private readonly _spacer = document.createElement('div');
  private readonly _rows = document.createElement('div');
  private _rowHeight: number;
  private _measured = false;
}
