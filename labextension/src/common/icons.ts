import { LabIcon } from '@jupyterlab/ui-components';

/** Three replicas fanned out from one cell: the toolbar and sidebar icon. */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M3 4h7v6H3z"/>
    <path d="M10 6.5h3v1h-3z"/>
    <path d="M12.5 3h1v12h-1z"/>
    <path d="M13 3h2v1h-2zM13 8.5h2v1h-2zM13 14h2v1h-2z"/>
    <path d="M15 1.5l5 2-5 2zM15 7l5 2-5 2zM15 12.5l5 2-5 2z"/>
    <path d="M3 13h7v2H3zM3 17h7v2H3zM3 21h16v1.5H3z"/>
  </g>
</svg>`;

export const distrunIcon = new LabIcon({ name: 'distrun:run', svgstr });
