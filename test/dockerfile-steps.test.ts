// Which Dockerfiles a node may build as they are (src/modules/templates/dockerfile.ts): RUN steps
// found through continuations and the escape directive, ONBUILD left out, URL sources refused.
import { describe, expect, it } from 'vitest';
import { dockerfileSteps } from '../src/modules/templates/dockerfile';

describe('dockerfile steps', () => {
  it('finds RUN steps, whatever their case, after comments and continuation lines', () => {
    expect(dockerfileSteps('FROM a\nCOPY x /x\nENV A=1 \\\n  B=2\n')).toEqual({ runs: false });
    expect(dockerfileSteps('FROM a\n# RUN in a comment\nENV A=1 \\\n  B=2\nrun echo hi\n')).toEqual({ runs: true });
    expect(dockerfileSteps('FROM a\nENV A=1 \\\nRUN=2\n')).toEqual({ runs: false });
    expect(dockerfileSteps('FROM a\nONBUILD RUN echo later\n')).toEqual({ runs: false });
    expect(dockerfileSteps('FROM a\r\n  RUN ["true"]\r\n')).toEqual({ runs: true });
  });

  it('follows the escape directive', () => {
    expect(dockerfileSteps('# escape=`\nFROM a\nENV A=1 `\nRUN=2\n')).toEqual({ runs: false });
    expect(dockerfileSteps('# escape=`\nFROM a\nENV A=1 \\\nRUN echo\n')).toEqual({ runs: true });
  });

  it('refuses sources fetched by URL, naming the Dockerfile field', () => {
    for (const step of [
      'ADD https://example.test/x /x',
      'ADD --chown=1 http://127.0.0.1/x /x',
      'COPY git@host:repo.git /r',
      'add HTTP://x/y /y',
    ]) {
      expect(() => dockerfileSteps(`FROM a\n${step}\n`)).toThrow(/devcontainer\.build\.dockerfile: .*URL/);
    }
    expect(dockerfileSteps('FROM a\nADD files.tar /x\nCOPY --from=base /a /b\n')).toEqual({ runs: false });
  });
});
