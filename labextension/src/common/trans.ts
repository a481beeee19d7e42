/**
 * What distrun needs of a translation bundle (`TranslationBundle` satisfies it), so pure
 * formatting code runs the same in the browser and in unit tests.
 */
export interface ITrans {
  __(msgid: string, ...args: any[]): string;
}
