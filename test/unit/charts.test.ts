import assert from 'node:assert/strict';
import { escapeXml, lineChartsSvg, niceTicks } from '../../src/core/charts/svg';

describe('SVG charts', () => {
  it('nice ticks cover the range in 1/2/2.5/5 steps', () => {
    assert.deepEqual(niceTicks(0, 1, 5), [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceTicks(0, 80, 6), [0, 20, 40, 60, 80]);
    assert.deepEqual(niceTicks(3, 3), [3, 3.2, 3.4, 3.6, 3.8, 4]);
    assert.deepEqual(niceTicks(NaN, 1), []);
  });

  it('escapes every text (titles and series names come from users and run dirs)', () => {
    const svg = lineChartsSvg(
      [
        {
          title: '<b>x</b>',
          series: [
            {
              name: 'a&"b"',
              points: [
                [0, 0],
                [1, 0.5],
              ],
            },
          ],
        },
      ],
      { title: "it's" },
    );
    assert.ok(!svg.includes('<b>'));
    assert.ok(svg.includes('&lt;b&gt;x&lt;/b&gt;'));
    assert.ok(svg.includes('a&amp;&quot;b&quot;'));
    assert.ok(svg.includes('it&#39;s'));
    assert.equal(escapeXml('<&>'), '&lt;&amp;&gt;');
  });

  it('draws one path per series with data, same colour for the same name across panels, NaN points dropped', () => {
    const svg = lineChartsSvg([
      {
        title: 'p1',
        series: [
          {
            name: 'run',
            points: [
              [0, 0.1],
              [10, NaN],
              [20, 0.4],
            ],
          },
          { name: 'empty', points: [] },
        ],
      },
      {
        title: 'p2',
        series: [
          {
            name: 'run',
            points: [
              [0, 1],
              [20, 2],
            ],
          },
        ],
      },
    ]);
    const paths = [...svg.matchAll(/<path d="([^"]+)" fill="none" stroke="([^"]+)"/g)];
    assert.equal(paths.length, 2);
    assert.equal(paths[0]![2], paths[1]![2]);
    assert.equal(paths[0]![1]!.split('L').length, 2, 'the NaN point is not drawn');
  });
});
