/** The product version (from package.json; esbuild inlines only this field). */
import { version } from '../../package.json';

export const VERSION: string = version;
